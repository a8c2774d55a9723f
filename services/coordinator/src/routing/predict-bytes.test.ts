import { describe, expect, it } from "vitest";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, isWardenError, type WardenError } from "@warden/common";
import { PredictOptionsSchema, PredictRequestSchema, PredictResponseSchema, ReplySchema } from "@warden/proto";
import { predictResponseBytes, splitPredictRequest } from "./predict-bytes.js";

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

  it("wraps the backend's Reply bytes in a PredictResponse without decoding them", () => {
    const reply = create(ReplySchema, { message: new TextEncoder().encode("m: w0"), tokens: 1, promptTokens: 2 });
    const res = fromBinary(PredictResponseSchema, predictResponseBytes(toBinary(ReplySchema, reply), "gpu-1"));
    expect(res.nodeId).toBe("gpu-1");
    expect(res.reply).toEqual(reply);
  });
});
