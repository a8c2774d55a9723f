import type * as Http2 from "node:http2";
import type { ClientHttp2Session, ClientHttp2Stream, OutgoingHttpHeaders } from "node:http2";
import { connect as netConnect, isIP } from "node:net";
import type * as Tls from "node:tls";
import { Code, WardenError, type AbortLike } from "@warden/common";
import type { ClientTls } from "./tls-material.js";
import { notConnectedTransport } from "./call-never-sent.js";

let http2: typeof Http2 | undefined;

/**
 * node:http2 on first use, not at import: loading it (with http, tls and
 * crypto) is tens of milliseconds, which `warden --help` and every short
 * command that makes no call would otherwise pay.
 */
function loadHttp2(): typeof Http2 {
  return (http2 ??= process.getBuiltinModule("node:http2"));
}

/**
 * The node:http2 constants a call uses (header names; RFC 9113 §7 error
 * codes), so building one needs no node:http2 before it connects.
 * h2-client.test.ts checks them against node:http2's.
 */
export const h2c = {
  HTTP2_HEADER_METHOD: ":method",
  HTTP2_HEADER_PATH: ":path",
  HTTP2_HEADER_AUTHORITY: ":authority",
  HTTP2_HEADER_STATUS: ":status",
  HTTP2_HEADER_CONTENT_TYPE: "content-type",
  HTTP2_HEADER_TE: "te",
  NGHTTP2_NO_ERROR: 0,
  NGHTTP2_REFUSED_STREAM: 7,
  NGHTTP2_CANCEL: 8,
  NGHTTP2_ENHANCE_YOUR_CALM: 11,
} as const;

/** A session and the calls running on it: the socket keeps the process alive only while calls run. */
export class SessionSlot {
  active = 0;
  /** Set once the connection failed, closed or was told to go away: its streams end UNAVAILABLE. */
  gone = false;
  /** The peer's first SETTINGS frame arrived: its HTTP/2 stack runs (a frozen process's kernel still accepts the TCP connection). */
  answered = false;
  /** When the peer was last heard from (SETTINGS, a PING's answer, a response on any call), performance.now() ms. */
  heardAtMs = 0;
  /** A liveness PING is in flight (pingIfStale sends one at a time). */
  private pinging = false;

  constructor(readonly session: ClientHttp2Session) {}

  heard(): void {
    this.heardAtMs = performance.now();
  }

  /**
   * PINGs the peer when it was last heard from more than `freshMs` ago and no
   * PING is in flight; its answer counts as heard. Nothing before the peer's
   * SETTINGS (they count as heard when they come).
   */
  pingIfStale(freshMs: number): void {
    if (!this.answered || this.pinging || this.gone || performance.now() - this.heardAtMs <= freshMs) return;
    this.pinging = true;
    try {
      this.session.ping((err) => {
        this.pinging = false;
        if (err === null) this.heard();
      });
    } catch {
      // The session is closing: its calls report it.
      this.pinging = false;
    }
  }

  /** A call on this session ended: the socket stops holding the process open once none runs. */
  release(): void {
    if (--this.active === 0 && !this.session.destroyed) this.session.unref();
  }
}

/**
 * One HTTP/2 connection to a gRPC server (plaintext or TLS), opened on first use and
 * again after it closes. No name resolution, load balancing, retry or
 * interceptor layers: the coordinator→backend hop is a single known address
 * and the loader owns retries, so grpc-js's channel stack is pure cost there.
 */
export class H2Connection {
  private slot: SessionSlot | undefined;
  private closed = false;

  private readonly host: string;
  private readonly port: number;

  constructor(
    private readonly authority: string,
    private readonly tls: ClientTls | undefined,
    private readonly extraHeaders?: Readonly<Record<string, string>>,
  ) {
    const colon = authority.lastIndexOf(":");
    this.host = authority.slice(0, colon).replace(/^\[(.*)\]$/, "$1");
    this.port = Number(authority.slice(colon + 1));
  }

  open(headers: OutgoingHttpHeaders): { stream: ClientHttp2Stream; slot: SessionSlot } {
    if (this.closed) throw new WardenError(Code.Unavailable, `client for ${this.authority} is closed`);
    for (let attempt = 0; ; attempt++) {
      const slot = this.current();
      try {
        // No options: a POST leaves the stream open for the request by default (endStream false), and
        // node copies and validates an options object on every request.
        const stream = slot.session.request(this.extraHeaders === undefined ? headers : { ...this.extraHeaders, ...headers });
        if (slot.active++ === 0) slot.session.ref();
        return { stream, slot };
      } catch (err) {
        // request() throws once the session is closing (GOAWAY raced us): one fresh session.
        slot.gone = true;
        if (this.slot === slot) this.slot = undefined;
        if (attempt > 0) throw new WardenError(Code.Unavailable, `cannot reach ${this.authority}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      }
    }
  }

  /** The session calls go on now (opened when none is): a liveness check's target. */
  liveSlot(): SessionSlot | undefined {
    return this.closed ? undefined : this.current();
  }

  private current(): SessionSlot {
    const s = this.slot;
    if (s !== undefined && !s.gone) return s;
    // Nagle off: calls are small writes, and holding one back for the previous
    // segment's ACK stalls a pipeline of many calls (grpc-js does the same).
    const tls = this.tls;
    const session =
      tls === undefined
        ? loadHttp2().connect(`http://${this.authority}`, { createConnection: () => netConnect({ host: this.host, port: this.port, noDelay: true }) })
        : loadHttp2().connect(`https://${this.authority}`, { createConnection: () => this.tlsConnect(tls) });
    const slot = new SessionSlot(session);
    const retire = (): void => {
      slot.gone = true;
      if (this.slot === slot) this.slot = undefined;
    };
    // Session errors also reach every open stream, which reports them; this
    // listener only keeps an unhandled 'error' from crashing the process.
    session.on("error", retire);
    session.on("goaway", retire);
    session.on("close", retire);
    session.on("remoteSettings", () => {
      slot.answered = true;
      slot.heard();
    });
    session.unref();
    this.slot = slot;
    return slot;
  }

  /** A TLS socket offering h2; the certificate must name `serverName`, or else the host dialled (an IP SAN for an IP). */
  private tlsConnect(tls: ClientTls): Tls.TLSSocket {
    const name = tls.serverName ?? this.host;
    const socket = process.getBuiltinModule("node:tls").connect({
      host: this.host,
      port: this.port,
      ALPNProtocols: ["h2"],
      minVersion: "TLSv1.2",
      // SNI carries names only; an IP is checked against the certificate's IP SANs without it.
      ...(isIP(name) === 0 ? { servername: name } : {}),
      ...(tls.serverName === undefined && tls.verify === undefined ? {} : { checkServerIdentity: (h: string, cert: Tls.PeerCertificate) => process.getBuiltinModule("node:tls").checkServerIdentity(tls.serverName === undefined ? h : name, cert) ?? tls.verify?.(cert) }),
      ...(tls.ca === undefined ? {} : { ca: tls.ca }),
      ...(tls.cert === undefined ? {} : { cert: tls.cert }),
      ...(tls.key === undefined ? {} : { key: tls.key }),
    });
    socket.setNoDelay(true);
    return socket;
  }

  /**
   * Resolves once the current session's peer has been heard from within
   * `freshMs` (its SETTINGS on a new connection, else a PING answered), or
   * rejects UNAVAILABLE marked never-sent when it does not answer within
   * `answerWithinMs` — a SIGSTOPped process accepts TCP connections but
   * answers nothing — and then drops that session, so the next call dials
   * again. No request is sent before this resolves, so a call that fails here
   * ran nowhere.
   */
  whenAnswering(answerWithinMs: number, freshMs: number, signal: AbortLike | undefined): Promise<void> {
    if (this.closed) return Promise.reject(new WardenError(Code.Unavailable, `client for ${this.authority} is closed`, { details: { transport: notConnectedTransport } }));
    const slot = this.current();
    if (slot.answered && performance.now() - slot.heardAtMs <= freshMs) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      let done = false;
      const session = slot.session;
      const finish = (err: WardenError | undefined): void => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        session.removeListener("remoteSettings", onSettings);
        session.removeListener("close", onClose);
        signal?.removeEventListener("abort", onAbort);
        if (slot.active === 0 && !session.destroyed) session.unref();
        if (err === undefined) resolve();
        else reject(err);
      };
      const onSettings = (): void => {
        finish(undefined);
      };
      const onClose = (): void => {
        finish(new WardenError(Code.Unavailable, `cannot connect to ${this.authority}`, { details: { transport: notConnectedTransport } }));
      };
      const onAbort = (): void => {
        finish(WardenError.from(signal?.reason, Code.Canceled));
      };
      const timer = setTimeout(() => {
        // Frozen or wedged: drop the session so a resumed peer is dialled afresh, not waited on.
        this.retire(slot);
        finish(new WardenError(Code.Unavailable, `the server at ${this.authority} did not answer within ${String(answerWithinMs)} ms (paused, or its event loop blocked); the call was not sent`, { details: { transport: notConnectedTransport, silent: "true" } }));
      }, answerWithinMs);
      session.ref();
      signal?.addEventListener("abort", onAbort, { once: true });
      session.once("close", onClose);
      if (!slot.answered) {
        session.once("remoteSettings", onSettings);
        return;
      }
      try {
        session.ping((err) => {
          if (err !== null) return;
          slot.heard();
          finish(undefined);
        });
      } catch {
        onClose();
      }
    });
  }

  /** Drops `slot`'s session (its calls end UNAVAILABLE); the next call opens a new one. */
  retire(slot: SessionSlot): void {
    slot.gone = true;
    if (this.slot === slot) this.slot = undefined;
    if (!slot.session.destroyed) slot.session.destroy();
  }

  close(): void {
    this.closed = true;
    this.slot?.session.destroy();
    this.slot = undefined;
  }
}
