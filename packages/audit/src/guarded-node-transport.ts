import { NatsConnectionImpl, hasWsProtocol, setTransportFactory, type ConnectionOptions, type NatsConnection } from "@nats-io/transport-node";
import { NodeTransport, nodeResolveHost } from "@nats-io/transport-node/lib/node_transport.js";
import { invalidArgument } from "@warden/common";

/**
 * nats.js's Node transport, minus one way to crash the process: it drops
 * writes once the socket can no longer be written to.
 *
 * Why (@nats-io/transport-node 3.4.0): when the server goes away its FIN ends
 * the socket's readable side and Node then ends the writable side too
 * (`allowHalfOpen` is false), but nats.js counts the connection as up until
 * the socket's 'close', which takes a few more event-loop turns. A publish in
 * that window is flushed (from a microtask) into the ended socket, and Node
 * destroys the socket with ERR_STREAM_WRITE_AFTER_END, emitting 'error' on the
 * next tick. If `nc.close()` runs in between (the same burst of microtasks, as
 * when a publisher or the audit link closes just after the server died),
 * nats.js calls `socket.removeAllListeners()` before destroying the socket, so
 * the queued 'error' has no listener and Node throws it as an uncaught
 * exception: "Error: write after end" from `NodeTransport._send`.
 *
 * A write to an ended socket can only fail, and nats.js ignores write failures
 * anyway (the socket's 'close' starts its reconnect, and the publisher fails
 * the acks a reconnect orphans), so dropping it loses nothing that was not
 * already lost. Remove this once nats.js guards `_send` itself.
 */
export class GuardedNodeTransport extends NodeTransport {
  override _send(frame: Uint8Array): Promise<void> {
    // Typed as always set, but nats.js clears it on close (its own `_send` checks for that).
    const socket = this.socket as NodeTransport["socket"] | undefined;
    if (socket !== undefined && !socket.writable) return Promise.resolve();
    return super._send(frame);
  }
}

/**
 * `connect` from @nats-io/transport-node, with {@link GuardedNodeTransport}.
 * nats.js keeps the transport factory in one process-wide slot that its own
 * `connect` overwrites and that every reconnect reads, so Warden opens every
 * connection here (`connectAudit`; an eslint rule forbids importing `connect`
 * from @nats-io/transport-node elsewhere).
 */
export function connectGuarded(options: ConnectionOptions): Promise<NatsConnection> {
  if (hasWsProtocol(options)) return Promise.reject(invalidArgument("servers", "websocket URLs are not supported; use nats://host:port"));
  setTransportFactory({ factory: () => new GuardedNodeTransport(), dnsResolveFn: nodeResolveHost });
  return NatsConnectionImpl.connect(options);
}
