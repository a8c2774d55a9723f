import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { PredictOptionsSchema } from "@warden/proto";
import { promptText } from "./prefix-routing.js";
import { promptOfOptions } from "./prompt-bytes.js";

const text = fc.oneof(fc.string({ maxLength: 40 }), fc.string({ unit: "grapheme", maxLength: 40 }), fc.string({ unit: "binary", maxLength: 40 }));

describe("promptOfOptions", () => {
  it("renders the first maxChars characters exactly as the decoded message does, with other fields and merged occurrences around", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            Prompt: fc.option(text, { nil: undefined }),
            Messages: fc.array(fc.record({ role: text, content: text, name: text }), { maxLength: 4 }),
            Tokens: fc.integer({ min: 0, max: 1000 }),
            StopPrompts: fc.array(text, { maxLength: 2 }),
          }),
          { minLength: 1, maxLength: 3 },
        ),
        fc.integer({ min: 0, max: 120 }),
        (parts, maxChars) => {
          // Several encoded messages back to back: protobuf merges them (last Prompt wins, Messages append).
          const bytes = new Uint8Array(parts.flatMap((p) => [...toBinary(PredictOptionsSchema, create(PredictOptionsSchema, p))]));
          const full = promptText(fromBinary(PredictOptionsSchema, bytes));
          expect(promptText(promptOfOptions(bytes, maxChars)).slice(0, maxChars)).toBe(full.slice(0, maxChars));
        },
      ),
      { numRuns: 500 },
    );
  });

  it("decodes no more of a long prompt than the bound needs", () => {
    const prompt = "x".repeat(1_000_000);
    const bytes = toBinary(PredictOptionsSchema, create(PredictOptionsSchema, { Prompt: prompt, Tokens: 3 }));
    expect(promptOfOptions(bytes, 100)?.Prompt?.length).toBeLessThanOrEqual(3 * 100 + 3);
    const chat = toBinary(PredictOptionsSchema, create(PredictOptionsSchema, { Messages: Array.from({ length: 1_000 }, () => ({ role: "user", content: "y".repeat(1_000) })) }));
    const read = promptOfOptions(chat, 5_000)?.Messages ?? [];
    expect(read.length).toBeLessThanOrEqual(6);
    expect(promptText({ Messages: read }).slice(0, 5_000)).toBe(promptText(fromBinary(PredictOptionsSchema, chat)).slice(0, 5_000));
  });

  it("gives no prompt for bytes that are not wire format", () => {
    expect(promptOfOptions(Uint8Array.of(0x0a, 0x05, 0x61), 100)).toBeUndefined();
    expect(promptOfOptions(Uint8Array.of(0x0f, 0x01), 100)).toBeUndefined();
  });
});
