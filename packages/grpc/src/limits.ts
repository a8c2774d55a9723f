/**
 * Maximum message size set explicitly both ways on every server and client:
 * 50 MiB, what LocalAI's backends accept (grpc.MaxRecvMsgSize(50*1024*1024)
 * in Go, grpc.max_message_length in Python), so an image, audio or long
 * prompt that reaches a backend directly also fits through Warden. Beyond it
 * a call is RESOURCE_EXHAUSTED. Configurable (coordinator and agent
 * `limits.maxMessageSize`, backend-sim `--max-message-size`).
 */
export const defaultMaxMessageBytes = 50 * 1024 * 1024;

/**
 * Request metadata (HTTP/2 header list: names, values and 32 bytes of
 * overhead per entry, as RFC 7540 §6.5.2 counts it) a server accepts on one
 * call. 16 KiB is room for a bearer token, a trace context and user agents;
 * beyond it the call is RESOURCE_EXHAUSTED before its handler runs.
 */
export const defaultMaxMetadataBytes = 16 * 1024;

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
