import type { EventEmitter } from "node:events";
import type { Socket } from "node:net";
import type { ServerHttp2Session, ServerHttp2Stream } from "node:http2";
import { invalidArgument, parseDurationMs } from "@warden/common";

/**
 * What one listener lets peers hold before they have proven anything: open
 * connections per remote address and in total, time to finish the TLS
 * handshake and the HTTP/2 preface, and how long an HTTP/2 session with no
 * call open may sit. A peer is its IP address (IPv4-mapped IPv6 as IPv4), so
 * a flood of idle or slow sockets from one address fills its own quota, not
 * the listener's.
 */
export interface PeerCaps {
  /** Open connections from one address; past it a new one is closed at once. @default 64 */
  readonly maxConnectionsPerPeer: number;
  /** Open connections on the listener in total. @default 4096 */
  readonly maxConnections: number;
  /** A connection whose TLS handshake and HTTP/2 preface (the client's SETTINGS) are not done by then is closed. @default 10 s */
  readonly handshakeTimeoutMs: number;
  /** An HTTP/2 session with no call open for this long is closed (GOAWAY; clients reconnect on their next call). @default 5 min */
  readonly idleTimeoutMs: number;
}

const minute = 60_000;

/** Each cap's YAML name under `limits:`, default and range (ms for durations). */
export const peerCapBounds = Object.freeze({
  maxConnectionsPerPeer: { field: "maxConnectionsPerPeer", dflt: 64, min: 1, max: 65_536 },
  maxConnections: { field: "maxConnections", dflt: 4096, min: 1, max: 65_536 },
  handshakeTimeout: { field: "handshakeTimeoutMs", dflt: 10_000, min: 1_000, max: 5 * minute },
  idleConnectionTimeout: { field: "idleTimeoutMs", dflt: 5 * minute, min: 1_000, max: 24 * 60 * minute },
} as const);

export const defaultPeerCaps: PeerCaps = Object.freeze({ maxConnectionsPerPeer: 64, maxConnections: 4096, handshakeTimeoutMs: 10_000, idleTimeoutMs: 5 * minute });

/** The `limits:` keys parsePeerCaps reads (a config's parser admits them). */
export const peerCapKeys: readonly string[] = Object.keys(peerCapBounds);

/** Reads the peer caps from a `limits:` map (other keys ignored); INVALID_ARGUMENT names `limits.<key>`. */
export function parsePeerCaps(raw: Readonly<Record<string, unknown>>): PeerCaps {
  const out: Record<string, number> = { ...(defaultPeerCaps as unknown as Record<string, number>) };
  for (const [key, b] of Object.entries(peerCapBounds)) {
    const v = raw[key];
    if (v === undefined) continue;
    const field = `limits.${key}`;
    const isDuration = b.field.endsWith("Ms");
    let n: number;
    if (isDuration) {
      if (typeof v !== "string" && typeof v !== "number") throw invalidArgument(field, `must be a duration like "10s", got ${JSON.stringify(v)}`);
      n = parseDurationMs(v, field);
    } else {
      if (typeof v !== "number" || !Number.isInteger(v)) throw invalidArgument(field, `must be an integer, got ${JSON.stringify(v)}`);
      n = v;
    }
    const show = (x: number): string => (isDuration ? `${String(x)}ms` : String(x));
    if (n < b.min || n > b.max) throw invalidArgument(field, `must be in [${show(b.min)}, ${show(b.max)}], got ${show(n)}`);
    out[b.field] = n;
  }
  return out as unknown as PeerCaps;
}

/** The peer a socket counts against: its remote IP, IPv4-mapped IPv6 folded to IPv4. */
export function peerOf(socket: { readonly remoteAddress?: string | undefined }): string {
  const a = socket.remoteAddress ?? "?";
  return a.startsWith("::ffff:") ? a.slice(7) : a;
}

/** Open connections by peer, and what was refused (for a log line or a test). */
export interface ConnectionCount {
  readonly open: number;
  readonly refused: number;
  ofPeer(peer: string): number;
}

const counted = Symbol("warden.peerCounted");

/**
 * Counts a server's TCP connections by peer on its 'connection' event (before
 * any TLS or HTTP byte is read) and closes one past either cap at once, so
 * the refusal costs a file descriptor for a moment and nothing else. Works on
 * any net.Server (http, https, http2). `onRefused` is called once per refusal.
 */
export function capConnections(server: EventEmitter, caps: { readonly maxConnectionsPerPeer: number; readonly maxConnections: number }, onRefused?: (peer: string, why: "peer" | "total") => void): ConnectionCount {
  const byPeer = new Map<string, number>();
  let open = 0;
  let refused = 0;
  server.prependListener("connection", (socket: Socket) => {
    const peer = peerOf(socket);
    const n = byPeer.get(peer) ?? 0;
    const why = n >= caps.maxConnectionsPerPeer ? "peer" : open >= caps.maxConnections ? "total" : undefined;
    if (why !== undefined) {
      refused++;
      socket.destroy();
      onRefused?.(peer, why);
      return;
    }
    byPeer.set(peer, n + 1);
    open++;
    (socket as unknown as Record<symbol, boolean>)[counted] = true;
    socket.once("close", () => {
      open--;
      const left = (byPeer.get(peer) ?? 1) - 1;
      if (left <= 0) byPeer.delete(peer);
      else byPeer.set(peer, left);
    });
  });
  return {
    get open() {
      return open;
    },
    get refused() {
      return refused;
    },
    ofPeer: (peer) => byPeer.get(peer) ?? 0,
  };
}

/**
 * Every peer cap on an HTTP/2 server (plaintext or TLS; grpc-js's or ours):
 * the connection caps above; a connection whose HTTP/2 session has not
 * received the client's SETTINGS within `handshakeTimeoutMs` of the TCP
 * accept (a TLS handshake that never ends, a plaintext socket that sends
 * nothing) is destroyed; a session with no open stream for `idleTimeoutMs`
 * is closed. Cost per call: one counter and one 'close' listener per stream.
 */
export function guardHttp2Server(server: EventEmitter, caps: PeerCaps, onRefused?: (peer: string, why: "peer" | "total") => void): ConnectionCount {
  const count = capConnections(server, caps, onRefused);
  // Sockets still in their handshake, by remote address:port (a TLS session's socket is another object over the same TCP connection).
  const pending = new Map<string, Socket>();
  const keyOf = (s: { readonly remoteAddress?: string | undefined; readonly remotePort?: number | undefined }): string => `${s.remoteAddress ?? "?"}|${String(s.remotePort ?? 0)}`;
  server.on("connection", (socket: Socket) => {
    if ((socket as unknown as Record<symbol, boolean>)[counted] !== true) return;
    const key = keyOf(socket);
    pending.set(key, socket);
    const timer = setTimeout(() => {
      if (pending.get(key) === socket) socket.destroy();
    }, caps.handshakeTimeoutMs);
    timer.unref();
    socket.once("close", () => {
      clearTimeout(timer);
      if (pending.get(key) === socket) pending.delete(key);
    });
  });
  server.on("session", (session: ServerHttp2Session) => {
    const key = keyOf(session.socket);
    session.once("remoteSettings", () => pending.delete(key));
    let streams = 0;
    let idle: NodeJS.Timeout | undefined;
    const arm = (): void => {
      idle = setTimeout(() => {
        if (streams === 0 && !session.closed && !session.destroyed) session.close();
      }, caps.idleTimeoutMs);
      idle.unref();
    };
    arm();
    session.on("stream", (stream: ServerHttp2Stream) => {
      streams++;
      if (idle !== undefined) clearTimeout(idle);
      idle = undefined;
      stream.once("close", () => {
        streams--;
        if (streams === 0 && !session.closed) arm();
      });
    });
    session.once("close", () => {
      if (idle !== undefined) clearTimeout(idle);
    });
  });
  return count;
}
