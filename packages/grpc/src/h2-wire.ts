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

/** The gRPC message prefix: a compressed flag and a big-endian 32-bit length. */
const prefixBytes = 5;

/**
 * Splits a byte stream into gRPC messages, in time linear in the bytes
 * pushed however they are chunked. A message that spans chunks is collected
 * as a list of slices with a running length and copied once, when its last
 * byte arrives; a message whole inside one chunk is handed out as a slice of
 * it, uncopied. The prefix is checked before any of the body is kept: a
 * compressed message (none is ever negotiated) or a claimed length over
 * `maxBytes` is an error, and the reader stops (every later push returns the
 * same error). Memory held is what arrived of one unfinished message, never
 * what its prefix claims.
 */
export class MessageReader {
  /** The prefix of the next message, while fewer than 5 of its bytes have arrived. */
  /** Allocated the first time a prefix spans chunks (rare: most calls never need it). */
  private prefix: Buffer | undefined;
  private prefixHave = 0;
  /** Body length of the message being collected; -1 while its prefix is incomplete. */
  private bodyBytes = -1;
  /** The slices of a message spanning chunks; made on the first such message, then reused. */
  private parts: Buffer[] | undefined;
  private partsBytes = 0;
  private failure: WardenError | undefined;

  constructor(
    private readonly maxBytes: number,
    private readonly what: string,
  ) {}

  push(chunk: Buffer, onMessage: (bytes: Buffer) => void): WardenError | undefined {
    if (this.failure !== undefined) return this.failure;
    let at = 0;
    const end = chunk.length;
    while (at < end) {
      if (this.bodyBytes < 0) {
        let flag: number;
        let len: number;
        if (this.prefixHave === 0 && end - at >= prefixBytes) {
          flag = chunk[at] ?? 0;
          len = chunk.readUInt32BE(at + 1);
          at += prefixBytes;
        } else {
          const take = Math.min(prefixBytes - this.prefixHave, end - at);
          const prefix = (this.prefix ??= Buffer.alloc(prefixBytes));
          chunk.copy(prefix, this.prefixHave, at, at + take);
          this.prefixHave += take;
          at += take;
          if (this.prefixHave < prefixBytes) break;
          this.prefixHave = 0;
          flag = prefix[0] ?? 0;
          len = prefix.readUInt32BE(1);
        }
        const err = this.check(flag, len);
        if (err !== undefined) {
          this.failure = err;
          return err;
        }
        this.bodyBytes = len;
      }
      const want = this.bodyBytes - this.partsBytes;
      const avail = end - at;
      if (this.partsBytes === 0 && avail >= want) {
        this.bodyBytes = -1;
        onMessage(chunk.subarray(at, at + want));
        at += want;
        continue;
      }
      const take = Math.min(want, avail);
      const parts = (this.parts ??= []);
      parts.push(chunk.subarray(at, at + take));
      this.partsBytes += take;
      at += take;
      if (this.partsBytes === this.bodyBytes) {
        const whole = Buffer.concat(parts, this.partsBytes);
        parts.length = 0;
        this.partsBytes = 0;
        this.bodyBytes = -1;
        onMessage(whole);
      }
    }
    return undefined;
  }

  private check(flag: number, len: number): WardenError | undefined {
    if (flag !== 0) return new WardenError(Code.Internal, `received a compressed ${this.what}, but no compression was negotiated`);
    if (len > this.maxBytes) return new WardenError(Code.ResourceExhausted, `received a ${this.what} of ${String(len)} bytes, over the ${String(this.maxBytes)}-byte limit`);
    return undefined;
  }

  /** True when bytes of an unfinished message are buffered. */
  get partial(): boolean {
    return this.prefixHave > 0 || this.bodyBytes >= 0;
  }

  /** Bytes of the unfinished message's body held so far (what a stalled sender costs). */
  get bufferedBytes(): number {
    return this.partsBytes;
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
