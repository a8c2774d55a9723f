import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { create, toBinary } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { HeartbeatRequestSchema, InventoryEntrySchema, OrphanProcessSchema, PredictOptionsSchema } from "@warden/proto";
import { Code, WardenError } from "@warden/common";
import { checkRequestElements, requestElements } from "./request-elements.js";

/** A HeartbeatRequest with random repeated content, then random unknown fields after it. */
const heartbeatBytes = fc
  .record({
    backends: fc.array(fc.record({ incarnation: fc.string({ maxLength: 8 }), model: fc.string({ maxLength: 8 }), pid: fc.nat() }), { maxLength: 40 }),
    orphans: fc.array(fc.record({ pid: fc.nat(), incarnation: fc.string({ maxLength: 4 }) }), { maxLength: 20 }),
    unknown: fc.array(fc.tuple(fc.integer({ min: 1000, max: 5000 }), fc.oneof(fc.nat().map((n) => ({ varint: n })), fc.uint8Array({ maxLength: 6 }).map((b) => ({ bytes: b })))), { maxLength: 30 }),
  })
  .map(({ backends, orphans, unknown }) => {
    const msg = create(HeartbeatRequestSchema, { nodeId: "n", backends: backends.map((b) => create(InventoryEntrySchema, b)), orphans: orphans.map((o) => create(OrphanProcessSchema, o)) });
    const w = new BinaryWriter();
    for (const [no, v] of unknown) {
      if ("varint" in v) w.tag(no, WireType.Varint).uint32(v.varint);
      else w.tag(no, WireType.LengthDelimited).bytes(v.bytes);
    }
    return new Uint8Array([...toBinary(HeartbeatRequestSchema, msg), ...w.finish()]);
  });

/** PredictOptions with a packed repeated int32 (EmbeddingTokens): one element per number, as small as one byte each. */
const packedBytes = fc.array(fc.integer({ min: 0, max: 300 }), { maxLength: 200 }).map((tokens) => toBinary(PredictOptionsSchema, create(PredictOptionsSchema, { EmbeddingTokens: tokens })));

describe("request element budget", () => {
  it("never counts more elements than the request has bytes, so a request within the budget in bytes needs no scan", () => {
    fc.assert(
      fc.property(heartbeatBytes, (bytes) => requestElements(HeartbeatRequestSchema, bytes) <= bytes.length),
      { numRuns: 300 },
    );
    fc.assert(
      fc.property(packedBytes, (bytes) => requestElements(PredictOptionsSchema, bytes) <= bytes.length),
      { numRuns: 300 },
    );
    // Bytes that are not a message at all: whatever is counted before the decoder would give up.
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => requestElements(HeartbeatRequestSchema, bytes) <= bytes.length),
      { numRuns: 500 },
    );
  });

  it("refuses a request past the budget RESOURCE_EXHAUSTED, and passes one at it", () => {
    const tokens = Array.from({ length: 50 }, (_, i) => i); // 50 one-byte numbers: 50 elements
    const bytes = toBinary(PredictOptionsSchema, create(PredictOptionsSchema, { EmbeddingTokens: tokens }));
    expect(requestElements(PredictOptionsSchema, bytes)).toBe(50);
    expect(() => {
      checkRequestElements(PredictOptionsSchema, bytes, 50);
    }).not.toThrow();
    let err: unknown;
    try {
      checkRequestElements(PredictOptionsSchema, bytes, 49);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(WardenError);
    expect((err as WardenError).code).toBe(Code.ResourceExhausted);
  });
});
