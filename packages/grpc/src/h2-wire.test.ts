import { afterEach, describe, expect, it, vi } from "vitest";
import fc from "fast-check";
import { Code, isWardenError } from "@warden/common";
import { MessageReader, frameMessage } from "./h2-wire.js";

function frame(msgs: readonly Uint8Array[]): Buffer {
  return Buffer.concat(msgs.map((m) => frameMessage(m, Number.MAX_SAFE_INTEGER, "message")));
}

/** Cuts `bytes` at the given offsets (any order, duplicates allowed) into chunks. */
function cut(bytes: Buffer, at: readonly number[]): Buffer[] {
  const points = [...new Set(at.map((a) => a % (bytes.length + 1)))].sort((a, b) => a - b);
  const out: Buffer[] = [];
  let from = 0;
  for (const p of points) {
    out.push(bytes.subarray(from, p));
    from = p;
  }
  out.push(bytes.subarray(from));
  return out;
}

function readAll(reader: MessageReader, chunks: readonly Buffer[]): Buffer[] {
  const got: Buffer[] = [];
  for (const c of chunks) {
    const err = reader.push(c, (m) => got.push(Buffer.from(m)));
    if (err !== undefined) throw err;
  }
  return got;
}

const messages = fc.array(fc.uint8Array({ minLength: 0, maxLength: 600 }), { minLength: 0, maxLength: 12 });

describe("MessageReader", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it("yields exactly the framed messages, in order, however the stream is chunked", () => {
    fc.assert(
      fc.property(messages, fc.array(fc.nat(), { maxLength: 40 }), (msgs, cuts) => {
        const bytes = frame(msgs);
        const reader = new MessageReader(1024, "message");
        const got = readAll(reader, cut(bytes, cuts));
        expect(got.map((b) => [...b])).toEqual(msgs.map((m) => [...m]));
        expect(reader.partial).toBe(false);
        expect(reader.bufferedBytes).toBe(0);
      }),
      { numRuns: 300 },
    );
  });

  it("one byte at a time: prefixes and bodies split at every position", () => {
    const msgs = [new Uint8Array([1, 2, 3]), new Uint8Array(0), new Uint8Array(300).fill(7), new Uint8Array([9])];
    const bytes = frame(msgs);
    const chunks = Array.from({ length: bytes.length }, (_, i) => bytes.subarray(i, i + 1));
    const reader = new MessageReader(1024, "message");
    expect(readAll(reader, chunks).map((b) => [...b])).toEqual(msgs.map((m) => [...m]));
  });

  it("many messages in one chunk, and a message whole in a chunk is handed out uncopied", () => {
    const msgs = Array.from({ length: 50 }, (_, i) => new Uint8Array([i, i + 1]));
    const bytes = frame(msgs);
    const reader = new MessageReader(1024, "message");
    const got: Buffer[] = [];
    expect(reader.push(bytes, (m) => got.push(m))).toBeUndefined();
    expect(got.map((b) => [...b])).toEqual(msgs.map((m) => [...m]));
    expect(got.every((b) => b.buffer === bytes.buffer)).toBe(true);
  });

  it("partial is true mid-prefix and mid-body, false between messages", () => {
    const bytes = frame([new Uint8Array(10)]);
    const reader = new MessageReader(1024, "message");
    const sink = (): void => undefined;
    reader.push(bytes.subarray(0, 3), sink);
    expect(reader.partial).toBe(true);
    reader.push(bytes.subarray(3, 8), sink);
    expect([reader.partial, reader.bufferedBytes]).toEqual([true, 3]);
    reader.push(bytes.subarray(8), sink);
    expect(reader.partial).toBe(false);
  });

  it("copies a message spanning many chunks once, not once per chunk (linear in its size)", () => {
    const body = new Uint8Array(1024 * 1024).map((_, i) => i % 251);
    const bytes = frame([body]);
    const chunks = cut(bytes, Array.from({ length: 1024 }, (_, i) => i * 1024 + 3));
    const concat = vi.spyOn(Buffer, "concat");
    const reader = new MessageReader(2 * 1024 * 1024, "message");
    const got = readAll(reader, chunks);
    let copied = 0;
    for (const [list, total] of concat.mock.calls) copied += total ?? list.reduce((n, b) => n + b.length, 0);
    expect(got).toHaveLength(1);
    expect(Buffer.compare(got[0] ?? Buffer.alloc(0), Buffer.from(body))).toBe(0);
    // One copy of the body; the old reader re-concatenated its pending bytes on every chunk (~512 MiB here).
    expect(copied).toBeLessThanOrEqual(bytes.length);
  });

  it("a prefix claiming more than the limit is RESOURCE_EXHAUSTED before any of the body is kept, and the reader stays failed", () => {
    const limit = 1000;
    const prefix = Buffer.from([0, 0, 0, 0, 0]);
    prefix.writeUInt32BE(limit + 1, 1);
    const reader = new MessageReader(limit, "request");
    const got: Buffer[] = [];
    // The prefix split across two chunks, then the body starts in the second.
    expect(reader.push(prefix.subarray(0, 2), (m) => got.push(m))).toBeUndefined();
    const err = reader.push(Buffer.concat([prefix.subarray(2), Buffer.alloc(500)]), (m) => got.push(m));
    expect(isWardenError(err, Code.ResourceExhausted)).toBe(true);
    expect(err?.rawMessage).toBe("received a request of 1001 bytes, over the 1000-byte limit");
    expect(reader.bufferedBytes).toBe(0);
    // Later bytes are not parsed as a fresh prefix: the same error, nothing delivered.
    expect(reader.push(frame([new Uint8Array(3)]), (m) => got.push(m))).toBe(err);
    expect(got).toEqual([]);
  });

  it("a message of exactly the limit is accepted", () => {
    const reader = new MessageReader(100, "message");
    expect(readAll(reader, cut(frame([new Uint8Array(100)]), [1, 50]))[0]).toHaveLength(100);
  });

  it("a compressed message is refused (none is negotiated)", () => {
    const bytes = frame([new Uint8Array(4)]);
    bytes[0] = 1;
    const err = new MessageReader(100, "reply").push(bytes, () => undefined);
    expect(isWardenError(err, Code.Internal)).toBe(true);
    expect(err?.rawMessage).toMatch(/compressed reply/);
  });
});
