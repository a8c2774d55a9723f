import type { IncomingHttpHeaders, OutgoingHttpHeaders, ServerHttp2Session } from "node:http2";
import type { PeerCertificate, TLSSocket } from "node:tls";
import { Metadata } from "@grpc/grpc-js";
import type { CallSignal } from "@warden/common";
import { peerCertificateOf } from "./peer-identity.js";
import type { HandlerContext } from "./types.js";

/** grpc-js's rule for a text metadata value (Metadata drops a key whose value breaks it). */
const legalTextValue = /^[ -~]*$/;

/** Metadata objects are built only when a handler asks for them: most calls never do. */
export class LeanContext implements HandlerContext {
  private md: Metadata | undefined;
  private header: Metadata | undefined;
  private trailer: Metadata | undefined;

  constructor(
    readonly cancel: CallSignal,
    private readonly headers: IncomingHttpHeaders,
    private readonly session: ServerHttp2Session,
    readonly deadlineAtMs: number | undefined,
  ) {}

  /** Made on first use (most routed calls read `cancel` only). */
  get signal(): AbortSignal {
    return this.cancel.signal;
  }

  get metadata(): Metadata {
    this.md ??= Metadata.fromHttp2Headers(this.headers);
    return this.md;
  }

  firstMetadataValue(key: string): string | undefined {
    if (this.md !== undefined) {
      const v = this.md.get(key)[0];
      return typeof v === "string" ? v : undefined;
    }
    const raw = this.headers[key];
    const v = Array.isArray(raw) ? raw[0] : raw;
    // What Metadata.fromHttp2Headers keeps: a text value of printable ASCII; never a pseudo-header or a binary (-bin) key.
    return typeof v === "string" && !key.startsWith(":") && !key.endsWith("-bin") && legalTextValue.test(v) ? v : undefined;
  }

  get peer(): string {
    const s = this.session.socket;
    return `${s.remoteAddress ?? "unknown"}:${String(s.remotePort ?? 0)}`;
  }

  /** The client certificate of a TLS connection (peerIdentity reads it); undefined in plaintext. */
  [peerCertificateOf](): PeerCertificate | undefined {
    const s = this.session.socket as Partial<TLSSocket>;
    if (s.getPeerCertificate === undefined || s.authorized !== true) return undefined;
    return s.getPeerCertificate();
  }

  get responseHeader(): Metadata {
    this.header ??= new Metadata();
    return this.header;
  }

  get responseTrailer(): Metadata {
    this.trailer ??= new Metadata();
    return this.trailer;
  }

  /** The response metadata the handler set, as HTTP/2 headers; undefined when it set none (most calls: nothing to merge). */
  headerFields(): OutgoingHttpHeaders | undefined {
    return this.header?.toHttp2Headers();
  }

  /** The trailing metadata the handler set; undefined when it set none. */
  trailerFields(): OutgoingHttpHeaders | undefined {
    return this.trailer?.toHttp2Headers();
  }
}
