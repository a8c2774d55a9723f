import { Code, WardenError } from "@warden/common";

/**
 * The gRPC-over-HTTP/2 wire pieces shared by the lean client and server:
 * length-prefixed messages, grpc-timeout and grpc-message encodings.
 */

/** The 5-byte gRPC prefix (uncompressed flag, big-endian length) followed by the message. */
export function frameMessage(bytes: Uint8Array, maxBytes: number, what: string): Buffer {
  if (bytes.length > maxBytes) throw new WardenError(Code.ResourceExhausted, `${what} of ${String(bytes.length)} bytes exceeds the ${String(maxBytes)}-byte limit`);
  const out = Buffer.allocUnsafe(5 + bytes.length);
  out[0] = 0;
  out.writeUInt32BE(bytes.length, 1);
  out.set(bytes, 5);
  return out;
}

/**
 * Splits a byte stream into gRPC messages; a message may span chunks. Returns
 * an error (and stops) on a compressed message — none is ever negotiated —
 * or one over `maxBytes`, before buffering it.
 */
export class MessageReader {
  private pending: Buffer | undefined;

  constructor(
    private readonly maxBytes: number,
    private readonly what: string,
  ) {}

  push(chunk: Buffer, onMessage: (bytes: Buffer) => void): WardenError | undefined {
    let buf = this.pending === undefined ? chunk : Buffer.concat([this.pending, chunk]);
    this.pending = undefined;
    while (buf.length >= 5) {
      if (buf[0] !== 0) return new WardenError(Code.Internal, `received a compressed ${this.what}, but no compression was negotiated`);
      const len = buf.readUInt32BE(1);
      if (len > this.maxBytes) return new WardenError(Code.ResourceExhausted, `received a ${this.what} of ${String(len)} bytes, over the ${String(this.maxBytes)}-byte limit`);
      if (buf.length < 5 + len) break;
      onMessage(buf.subarray(5, 5 + len));
      buf = buf.subarray(5 + len);
    }
    if (buf.length > 0) this.pending = buf;
    return undefined;
  }

  /** True when bytes of an unfinished message are buffered. */
  get partial(): boolean {
    return this.pending !== undefined;
  }
}

/** The grpc-timeout header: at most 8 digits, so long deadlines go in seconds. */
export function formatGrpcTimeout(remainingMs: number): string {
  const ms = Math.max(1, Math.ceil(remainingMs));
  return ms < 100_000_000 ? `${String(ms)}m` : `${String(Math.ceil(ms / 1000))}S`;
}

const timeoutUnitsMs: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1_000, m: 1, u: 0.001, n: 0.000_001 };

/** Milliseconds of a grpc-timeout header value; undefined when absent or malformed. */
export function parseGrpcTimeout(value: string | string[] | undefined): number | undefined {
  if (typeof value !== "string") return undefined;
  const m = /^(\d{1,8})([HMSmun])$/.exec(value);
  if (m === null) return undefined;
  return Number(m[1]) * (timeoutUnitsMs[m[2] ?? ""] ?? 0);
}

/** grpc-message is percent-encoded: bytes outside printable ASCII, and '%'. */
export function encodeGrpcMessage(message: string): string {
  let plain = true;
  for (let i = 0; i < message.length; i++) {
    const c = message.charCodeAt(i);
    if (c < 0x20 || c > 0x7e || c === 0x25) {
      plain = false;
      break;
    }
  }
  if (plain) return message;
  let out = "";
  for (const byte of Buffer.from(message, "utf8")) out += byte < 0x20 || byte > 0x7e || byte === 0x25 ? `%${byte.toString(16).toUpperCase().padStart(2, "0")}` : String.fromCharCode(byte);
  return out;
}

export function decodeGrpcMessage(raw: string | string[] | undefined): string {
  const s = Array.isArray(raw) ? raw.join(",") : (raw ?? "");
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}
