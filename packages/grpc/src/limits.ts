/**
 * Maximum message size set explicitly both ways on every server and client.
 * 16 MiB is far above any control-plane message and bounds a hostile sender.
 */
export const defaultMaxMessageBytes = 16 * 1024 * 1024;

/**
 * Concurrent streams (calls) one HTTP/2 connection may open on a server
 * (SETTINGS_MAX_CONCURRENT_STREAMS; a peer over it gets REFUSED_STREAM).
 * 256 is far above what a coordinator or an SDK pool runs on one connection
 * and bounds what one client can hold open at once: each open stream may
 * buffer up to a message's worth of request bytes.
 */
export const defaultMaxConcurrentStreams = 256;

const mib = 1024 * 1024;

/**
 * The lean server's per-connection HTTP/2 memory bound (node:http2
 * `maxSessionMemory`, in MiB), from the reply size limit. What counts is
 * mostly reply bytes queued to send (a reply beyond the client's flow-control
 * window waits in the session); request bytes are handed to the call as they
 * arrive and bounded by the receive limit per call. Room for two largest
 * replies queued behind slow readers, plus Node's 10 MiB default for header
 * tables and frames. Past it Node refuses new streams on that connection
 * (ENHANCE_YOUR_CALM: RESOURCE_EXHAUSTED at the client) until the queue
 * drains; the bound is credit-based, so calls already running finish.
 */
export function sessionMemoryMiB(maxSendMessageBytes: number): number {
  return 2 * Math.ceil(maxSendMessageBytes / mib) + 10;
}
