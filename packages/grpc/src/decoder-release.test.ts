import { describe, expect, it } from "vitest";
import { seededRng } from "@warden/common";
import { StreamDecoder } from "@grpc/grpc-js/build/src/stream-decoder.js";
import { releaseDecodedSlices } from "./decoder-release.js";

/** gRPC's length-prefixed framing: compression flag 0, 4-byte big-endian length, the bytes. */
function framed(body: Uint8Array): Buffer {
  const out = Buffer.alloc(5 + body.length);
  out.writeUInt32BE(body.length, 1);
  out.set(body, 5);
  return out;
}

interface Fields {
  readState: number;
  readCompressFlag: Buffer;
  readPartialMessage: Buffer[];
}

describe("releaseDecodedSlices", () => {
  it("is in place on this grpc-js (its decoder has the fields it releases)", () => {
    expect(releaseDecodedSlices()).toBe(true);
    expect(releaseDecodedSlices()).toBe(true);
  });

  it("messages split anywhere and packed together decode as before, and once each is complete the decoder keeps no view of what it read", () => {
    releaseDecodedSlices();
    const rng = seededRng(46);
    for (let round = 0; round < 200; round++) {
      const bodies = Array.from({ length: 1 + Math.floor(rng.next() * 5) }, () => Buffer.from(Array.from({ length: Math.floor(rng.next() * 40_000) }, () => Math.floor(rng.next() * 256))));
      const wire = Buffer.concat(bodies.map(framed));
      const decoder = new StreamDecoder(-1);
      const fields = decoder as unknown as Fields;
      const out: Buffer[] = [];
      for (let at = 0; at < wire.length; ) {
        // Chunks of 1 byte to 20 000: a flag, a length or a body cut anywhere.
        const end = Math.min(wire.length, at + 1 + Math.floor(rng.next() * (rng.next() < 0.3 ? 8 : 20_000)));
        // Each chunk its own buffer, as the HTTP/2 session hands them over.
        const chunk = Buffer.from(wire.subarray(at, end));
        out.push(...decoder.write(chunk));
        if (fields.readState === 0) {
          // Between messages: nothing of the chunks is held.
          expect(fields.readCompressFlag.length).toBe(0);
          expect(fields.readPartialMessage).toHaveLength(0);
        } else {
          // Within a message: what is held views the chunks read (the pieces are needed, so kept).
          expect(fields.readCompressFlag.length).toBe(1);
        }
        at = end;
      }
      expect(out.map((m) => m.toString("hex"))).toEqual(bodies.map((b) => framed(b).toString("hex")));
    }
  });
});
