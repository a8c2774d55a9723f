/**
 * A raw gRPC client over node:http2 for hostile-input tests: sends whatever
 * bytes it is given as the request body (framed or not) and reports exactly
 * how the server answered — grpc-status and message from the headers
 * (trailers-only) or the trailers, the HTTP status, and the RST_STREAM code —
 * so a test can insist on a clear status for every call.
 */
import { connect, constants as h2, type ClientHttp2Session } from "node:http2";

export interface RawOutcome {
  /** grpc-status, or undefined when the server sent none. */
  readonly status: number | undefined;
  readonly message: string;
  readonly httpStatus: number;
  /** RST_STREAM code (0 when the stream closed normally). */
  readonly rstCode: number;
  /** Reply messages' bytes seen before the end (not parsed). */
  readonly replyBytes: number;
}

/** A gRPC length-prefixed message: flag byte, 4-byte big-endian length, bytes. */
export function frame(bytes: Uint8Array, opts: { compressed?: boolean; declaredLength?: number } = {}): Buffer {
  const head = Buffer.alloc(5);
  head[0] = opts.compressed === true ? 1 : 0;
  head.writeUInt32BE(opts.declaredLength ?? bytes.length, 1);
  return Buffer.concat([head, bytes]);
}

export interface RawCallOptions {
  /** Sent as grpc-timeout (ms). */
  readonly timeoutMs?: number;
  /** Extra request headers (metadata). */
  readonly headers?: Record<string, string>;
  /** Cancel (RST_STREAM CANCEL) once this many reply bytes arrived: a stream that never ends is still answered. */
  readonly cancelAfterReplyBytes?: number;
}

export class RawGrpc {
  private session: ClientHttp2Session | undefined;

  constructor(private readonly address: string) {}

  private open(): ClientHttp2Session {
    if (this.session === undefined || this.session.destroyed || this.session.closed) {
      const s = connect(`http://${this.address}`);
      s.on("error", () => undefined);
      this.session = s;
    }
    return this.session;
  }

  /** Sends `body` (already framed, or raw garbage) to `path` and resolves with how the call ended. */
  call(path: string, body: Uint8Array, opts: RawCallOptions = {}): Promise<RawOutcome> {
    const session = this.open();
    return new Promise<RawOutcome>((resolve) => {
      const headers: Record<string, string> = {
        [h2.HTTP2_HEADER_METHOD]: "POST",
        [h2.HTTP2_HEADER_PATH]: path,
        [h2.HTTP2_HEADER_CONTENT_TYPE]: "application/grpc",
        te: "trailers",
        ...(opts.timeoutMs === undefined ? {} : { "grpc-timeout": `${String(opts.timeoutMs)}m` }),
        ...opts.headers,
      };
      const stream = session.request(headers);
      let status: number | undefined;
      let message = "";
      let httpStatus = 0;
      let replyBytes = 0;
      const take = (h: Record<string, unknown>): void => {
        if (h["grpc-status"] !== undefined) status = Number(h["grpc-status"]);
        if (typeof h["grpc-message"] === "string") message = decodeURIComponent(h["grpc-message"]);
      };
      stream.on("response", (h) => {
        httpStatus = Number(h[h2.HTTP2_HEADER_STATUS] ?? 0);
        take(h);
      });
      stream.on("trailers", (h: Record<string, unknown>) => {
        take(h);
      });
      stream.on("data", (d: Buffer) => {
        replyBytes += d.length;
        if (opts.cancelAfterReplyBytes !== undefined && replyBytes >= opts.cancelAfterReplyBytes && status === undefined) stream.close(h2.NGHTTP2_CANCEL);
      });
      stream.on("error", () => undefined);
      stream.on("close", () => {
        resolve({ status, message, httpStatus, rstCode: stream.rstCode, replyBytes });
      });
      stream.end(Buffer.from(body));
    });
  }

  close(): void {
    this.session?.close();
    this.session = undefined;
  }
}
