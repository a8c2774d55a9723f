import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { PredictOptionsSchema } from "@warden/proto";
import { simAnswer, simEcho } from "./sim-chat.js";

describe("backend-sim answers", () => {
  it("words up to Tokens, cut before a stop word; prompt tokens from the prompt or the messages", () => {
    expect(simAnswer(create(PredictOptionsSchema, { Prompt: "abc", Tokens: 4 }), { defaultTokens: 3, echo: false })).toEqual({ chunks: ["w0", " w1", " w2", " w3"], tokens: 4, promptTokens: 3 });
    expect(simAnswer(create(PredictOptionsSchema, { Prompt: "abc", StopPrompts: ["w2"] }), { defaultTokens: 5, echo: false }).chunks.join("")).toBe("w0 w1");
    const chat = create(PredictOptionsSchema, { UseTokenizerTemplate: true, Messages: [{ role: "user", content: "hello" }, { role: "assistant", content: "hi" }] });
    expect(simAnswer(chat, { defaultTokens: 1, echo: false }).promptTokens).toBe(7);
  });

  it("echo: what the request carried, as JSON", () => {
    const req = create(PredictOptionsSchema, { Messages: [{ role: "user", content: "x", name: "n" }], UseTokenizerTemplate: true, Tokens: 9, Seed: 3, StopPrompts: ["s"] });
    const a = simAnswer(req, { defaultTokens: 1, echo: true });
    expect(a.chunks).toEqual([simEcho(req)]);
    expect(JSON.parse(simEcho(req))).toMatchObject({ messages: [{ role: "user", content: "x", name: "n" }], useTokenizerTemplate: true, tokens: 9, seed: 3, stop: ["s"] });
  });
});
