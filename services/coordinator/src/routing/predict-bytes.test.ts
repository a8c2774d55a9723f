import { describe, expect, it } from "vitest";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { Code, isWardenError, type WardenError } from "@warden/common";
import { PredictOptionsSchema, PredictRequestSchema, PredictResponseSchema, ReplySchema } from "@warden/proto";
import { predictResponseBytes, replyTokens, splitPredictRequest } from "./predict-bytes.js";

describe("Predict pass-through bytes", () => {
  it("reads the model and forwards the options with ModelIdentity forced to the model", () => {
    const req = create(PredictRequestSchema, { model: "llama", options: { Prompt: "hi", Tokens: 7, ModelIdentity: "spoofed", StopPrompts: ["a", "b"] } });
    const { model, backendRequest } = splitPredictRequest(toBinary(PredictRequestSchema, req));
    expect(model).toBe("llama");
    const options = fromBinary(PredictOptionsSchema, backendRequest);
    expect(options).toMatchObject({ Prompt: "hi", Tokens: 7, ModelIdentity: "llama", StopPrompts: ["a", "b"] });
  });

  it("merges repeated options fields as protobuf does, skips unknown fields, and handles absent options", () => {
    const a = toBinary(PredictRequestSchema, create(PredictRequestSchema, { model: "m", options: { Prompt: "first" } }));
    const b = toBinary(PredictRequestSchema, create(PredictRequestSchema, { options: { Tokens: 3 } }));
    const unknown = Uint8Array.of(0xa0, 0x06, 0x01); // field 100, varint 1
    const joined = new Uint8Array([...a, ...unknown, ...b]);
    const merged = fromBinary(PredictRequestSchema, joined);
    const split = splitPredictRequest(joined);
    expect(split.model).toBe(merged.model);
    expect(fromBinary(PredictOptionsSchema, split.backendRequest)).toMatchObject({ Prompt: "first", Tokens: 3, ModelIdentity: "m" });
    const bare = splitPredictRequest(toBinary(PredictRequestSchema, create(PredictRequestSchema, { model: "x" })));
    expect(fromBinary(PredictOptionsSchema, bare.backendRequest).ModelIdentity).toBe("x");
  });

  it.each([
    ["a truncated model", Uint8Array.of(0x0a, 0x05, 0x61)], // model: length 5, 1 byte present
    ["a model that is not UTF-8", Uint8Array.of(0x0a, 0x01, 0xff)],
    ["options that are not wire format", Uint8Array.of(0x0a, 0x01, 0x6d, 0x12, 0x02, 0x0f, 0x01)], // model "m", options: tag with wire type 7
    ["options with a truncated field", Uint8Array.of(0x12, 0x03, 0x0a, 0x05, 0x61)], // options: Prompt length 5, 1 byte present
  ])("rejects %s with INVALID_ARGUMENT naming the request type, as the main port's decode does", (_what, bytes) => {
    const err = (() => {
      try {
        splitPredictRequest(bytes);
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(isWardenError(err, Code.InvalidArgument)).toBe(true);
    expect((err as WardenError).rawMessage).toMatch(/^request: is not a valid warden\.v1\.PredictRequest: /);
    expect(() => fromBinary(PredictRequestSchema, bytes)).toThrow();
  });

  it("accepts and refuses exactly the bytes @bufbuild's reader does (groups, long varints, truncation, mutations)", () => {
    // The reference: the same walk with BinaryReader (what the pass-through used before its own walker).
    const reference = (bytes: Uint8Array): { model: string; options: number[] } | "refused" => {
      try {
        const r = new BinaryReader(bytes);
        let model = "";
        const options: number[] = [];
        while (r.pos < r.len) {
          const [field, wire] = r.tag();
          if (field === 1 && wire === WireType.LengthDelimited) model = r.string(true);
          else if (field === 2 && wire === WireType.LengthDelimited) {
            const o = r.bytes();
            const inner = new BinaryReader(o);
            while (inner.pos < inner.len) {
              const [f, w] = inner.tag();
              inner.skip(w, f);
            }
            options.push(...o);
          } else r.skip(wire, field);
        }
        return { model, options };
      } catch {
        return "refused";
      }
    };
    const ours = (bytes: Uint8Array): { model: string; options: number[] } | "refused" => {
      try {
        const { model, backendRequest } = splitPredictRequest(bytes, () => "");
        // Without the appended identity (tag 54, length 0: two bytes).
        return { model, options: [...backendRequest.subarray(0, backendRequest.length - 3)] };
      } catch (e) {
        expect(isWardenError(e, Code.InvalidArgument)).toBe(true);
        return "refused";
      }
    };
    const valid = toBinary(PredictRequestSchema, create(PredictRequestSchema, { model: "m", options: { Prompt: "hi", Tokens: -1, Temperature: 0.5, Seed: 7, StopPrompts: ["x"] } }));
    const cases: Uint8Array[] = [
      valid,
      Uint8Array.of(0x12, 0x04, 0x0b, 0x08, 0x01, 0x0c), // options: group 1 { field 1 varint 1 }
      Uint8Array.of(0x12, 0x06, 0x0b, 0x13, 0x14, 0x08, 0x01, 0x0c), // nested groups
      Uint8Array.of(0x12, 0x02, 0x0b, 0x14), // group 1 ended by end-group 2
      Uint8Array.of(0x12, 0x01, 0x0c), // an end-group with no start
      Uint8Array.of(0x12, 0x01, 0x0b), // a group that never ends
      Uint8Array.of(0x12, 0x0b, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), // a 10-byte varint
      Uint8Array.of(0x12, 0x02, 0x08, 0x80), // a varint cut short
      Uint8Array.of(0x12, 0x05, 0x09, 0x01, 0x02, 0x03, 0x04), // fixed64 cut short
      Uint8Array.of(0x12, 0x05, 0x0d, 0x01, 0x02, 0x03, 0x04), // fixed32
      Uint8Array.of(0x12, 0x02, 0x00, 0x01), // field number 0
      Uint8Array.of(0x0b, 0x0a, 0x01, 0x6d, 0x0c, 0x0a, 0x01, 0x6e), // a group at the top level, then model "n"
      Uint8Array.of(0x08, 0x05, 0x0a, 0x01, 0x6d), // model field with the wrong wire type is skipped
    ];
    // Deterministic mutations of the valid request: every byte flipped to a few values, and every truncation.
    for (let i = 0; i < valid.length; i++) {
      for (const v of [0x00, 0x07, 0x0c, 0x80, 0xff]) {
        const m = Uint8Array.from(valid);
        m[i] = v;
        cases.push(m);
      }
      cases.push(valid.subarray(0, i));
    }
    for (const c of cases) {
      expect(ours(c), `bytes ${Buffer.from(c).toString("hex")}`).toEqual(reference(c));
      // As the lean server hands them over: a Buffer, a slice of a larger chunk (the model read through its own path).
      const chunk = Buffer.concat([Buffer.from([0xee, 0xee]), Buffer.from(c), Buffer.from([0xee])]);
      expect(ours(chunk.subarray(2, 2 + c.length)), `Buffer ${Buffer.from(c).toString("hex")}`).toEqual(reference(c));
    }
  });

  it("reads a model name from a Buffer as the strict UTF-8 decode does: ASCII, other scripts, and bytes that are not UTF-8 refused", () => {
    for (const model of ["llama-3.1_8b", "", "modèle", "模型", "🙂x", "a".repeat(300)]) {
      const bytes = Buffer.from(toBinary(PredictRequestSchema, create(PredictRequestSchema, { model, options: { Prompt: "p" } })));
      expect(splitPredictRequest(bytes).model).toBe(model);
    }
    // "m" then 0xc3 (a lead byte with no continuation): not UTF-8, as in a Uint8Array.
    const bad = Buffer.from([0x0a, 0x02, 0x6d, 0xc3]);
    expect(() => splitPredictRequest(bad)).toThrow(/is not a valid warden\.v1\.PredictRequest/);
  });

  it("wraps the backend's Reply bytes in a PredictResponse without decoding them", () => {
    const reply = create(ReplySchema, { message: new TextEncoder().encode("m: w0"), tokens: 1, promptTokens: 2 });
    const res = fromBinary(PredictResponseSchema, predictResponseBytes(toBinary(ReplySchema, reply), "gpu-1"));
    expect(res.nodeId).toBe("gpu-1");
    expect(res.reply).toEqual(reply);
    // Lengths that take one, two and three varint bytes, and node ids of several lengths.
    for (const size of [0, 127, 128, 16_383, 16_384, 70_000]) {
      const big = create(ReplySchema, { message: new Uint8Array(size).fill(7), tokens: size });
      const bytes = predictResponseBytes(toBinary(ReplySchema, big), `node-${String(size)}`);
      expect(bytes).toEqual(toBinary(PredictResponseSchema, create(PredictResponseSchema, { reply: big, nodeId: `node-${String(size)}` })));
    }
  });
});

describe("replyTokens: the completion tokens a backend's Reply bytes report, read in place", () => {
  it("equals the decoded Reply's tokens, whatever fields surround it; the last occurrence wins", () => {
    for (const tokens of [0, 1, 127, 128, 300_000, 2 ** 31 - 1]) {
      const bytes = toBinary(ReplySchema, create(ReplySchema, { message: new TextEncoder().encode("x".repeat(200)), tokens, promptTokens: 9, timingPromptProcessing: 1.5, audio: Uint8Array.of(1, 2, 3) }));
      expect(replyTokens(bytes)).toBe(fromBinary(ReplySchema, bytes).tokens);
    }
    const twice = new Uint8Array([...toBinary(ReplySchema, create(ReplySchema, { tokens: 4 })), ...toBinary(ReplySchema, create(ReplySchema, { tokens: 6 }))]);
    expect(replyTokens(twice)).toBe(6);
  });

  it("is 0 for a negative count, no count, or bytes that are not wire format (a plot figure, never a failed call)", () => {
    expect(replyTokens(toBinary(ReplySchema, create(ReplySchema, { tokens: -5 })))).toBe(0);
    expect(replyTokens(new Uint8Array(0))).toBe(0);
    expect(replyTokens(Uint8Array.of(0x10))).toBe(0);
    expect(replyTokens(Uint8Array.of(0xff, 0xff, 0xff))).toBe(0);
  });
});
