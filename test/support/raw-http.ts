/**
 * One HTTP/1.1 request written byte for byte on its own loopback connection
 * (any method, Host, content type, length or truncation a client library
 * would refuse to send), answered by the status line and headers. The
 * connection is closed once the headers are in, so an event stream that
 * never ends is read as well as a 404.
 */
import { connect as netConnect, type Socket } from "node:net";
import { connect as tlsConnect } from "node:tls";

export interface RawHttpRequest {
  readonly method: string;
  /** The request target, sent as is (`/v1/models?x=1`, `//..%zz`). */
  readonly path: string;
  /** Header lines; `host` is set to the listener's address unless given (null: no Host line at all). */
  readonly headers?: Readonly<Record<string, string | null>>;
  readonly body?: Buffer | string;
  /** Sent as content-length; the body's length unless given. */
  readonly contentLength?: number | null;
  /** The request line's version. @default "1.1" */
  readonly version?: "1.0" | "1.1";
}

export interface RawHttpAnswer {
  readonly status: number;
  /** Lower-cased names; a repeated header keeps its last value. */
  readonly headers: Readonly<Record<string, string>>;
  /** The body as read: whole with `wholeBody`, else what came with the headers (may be partial or chunked). */
  readonly bodyStart: string;
}

/** The request's bytes (exported so a failing fuzz case can be shown). */
export function rawRequestBytes(address: string, r: RawHttpRequest): Buffer {
  const body = r.body === undefined ? Buffer.alloc(0) : Buffer.isBuffer(r.body) ? r.body : Buffer.from(r.body, "utf8");
  const headers: Record<string, string | null> = { host: address, connection: "close", ...(r.headers ?? {}) };
  const length = r.contentLength === undefined ? (r.body === undefined ? null : body.length) : r.contentLength;
  if (length !== null) headers["content-length"] = String(length);
  const lines = [`${r.method} ${r.path} HTTP/${r.version ?? "1.1"}`, ...Object.entries(headers).flatMap(([k, v]) => (v === null ? [] : [`${k}: ${v}`])), "", ""];
  return Buffer.concat([Buffer.from(lines.join("\r\n"), "latin1"), body]);
}

/** Sends `r` to `address` (host:port); rejects when the server closes without a status line or `deadlineMs` passes (a hang). */
export function rawHttp(address: string, r: RawHttpRequest, o: { readonly tls?: boolean; readonly deadlineMs?: number; readonly wholeBody?: boolean } = {}): Promise<RawHttpAnswer> {
  const colon = address.lastIndexOf(":");
  const host = address.slice(0, colon).replace(/^\[(.*)\]$/, "$1");
  const port = Number(address.slice(colon + 1));
  return new Promise((resolve, reject) => {
    const sock: Socket = o.tls === true ? tlsConnect({ host, port, rejectUnauthorized: false }) : netConnect({ host, port });
    let buf = Buffer.alloc(0);
    let done = false;
    const finish = (err: Error | undefined, a?: RawHttpAnswer): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      if (err !== undefined) reject(err);
      else if (a !== undefined) resolve(a);
    };
    const timer = setTimeout(() => {
      finish(new Error(`no answer within ${String(o.deadlineMs ?? 60_000)}ms`));
    }, o.deadlineMs ?? 60_000);
    const parse = (final: boolean): void => {
      const end = buf.indexOf("\r\n\r\n");
      if (end < 0) {
        if (final) finish(new Error(`connection closed without a whole answer: ${JSON.stringify(buf.toString("latin1").slice(0, 200))}`));
        return;
      }
      const [statusLine = "", ...lines] = buf.subarray(0, end).toString("latin1").split("\r\n");
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine);
      if (m === null) {
        finish(new Error(`not an HTTP answer: ${JSON.stringify(statusLine.slice(0, 200))}`));
        return;
      }
      const headers: Record<string, string> = {};
      for (const l of lines) {
        const i = l.indexOf(":");
        if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
      }
      finish(undefined, { status: Number(m[1]), headers, bodyStart: buf.subarray(end + 4).toString("utf8") });
    };
    sock.on(o.tls === true ? "secureConnect" : "connect", () => {
      // The server may answer (413, 421) and close before all of a large body is written: that is not an error here.
      sock.write(rawRequestBytes(address, r), () => undefined);
    });
    sock.on("data", (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      // wholeBody: read to the end (Connection: close), for a body to look at; not for streams.
      if (o.wholeBody !== true) parse(false);
    });
    sock.on("end", () => {
      parse(true);
    });
    sock.on("close", () => {
      parse(true);
    });
    sock.on("error", (err) => {
      // EPIPE/ECONNRESET after an early answer: the answer, if whole, was already taken.
      if (buf.indexOf("\r\n\r\n") >= 0) parse(true);
      else finish(err);
    });
  });
}
