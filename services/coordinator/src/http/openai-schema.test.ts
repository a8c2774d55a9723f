import { describe, expect, it } from "vitest";
import { WardenError } from "@warden/common";
import { openAiBounds as b, parseChatRequest, parseCompletionRequest, parseEmbeddingRequest, parseImageRequest, parseSpeechRequest, parseTranscriptionFields } from "./openai-schema.js";

/** The field a refused body names (the test fails if it is accepted). */
function refused(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return WardenError.from(err).details["field"];
  }
  throw new Error("accepted");
}

const msg = { role: "user", content: "x" };
const chat = (extra: Record<string, unknown>): unknown => ({ model: "m", messages: [msg], ...extra });

describe("OpenAI request bounds: just inside accepted, just outside refused naming the field", () => {
  it("chat", () => {
    expect(parseChatRequest({ model: "m", messages: Array.from({ length: b.messages }, () => msg) }).messages).toHaveLength(b.messages);
    expect(refused(() => parseChatRequest({ model: "m", messages: Array.from({ length: b.messages + 1 }, () => msg) }))).toBe("messages");
    expect(parseChatRequest(chat({ stop: Array.from({ length: b.stopSequences }, () => "s") })).stop).toHaveLength(b.stopSequences);
    expect(refused(() => parseChatRequest(chat({ stop: Array.from({ length: b.stopSequences + 1 }, () => "s") })))).toBe("stop");
    expect(refused(() => parseChatRequest(chat({ stop: ["a", "x".repeat(b.stopChars + 1)] })))).toBe("stop[1]");
    expect(parseChatRequest(chat({ max_tokens: b.maxTokens })).maxTokens).toBe(b.maxTokens);
    expect(refused(() => parseChatRequest(chat({ max_tokens: b.maxTokens + 1 })))).toBe("max_tokens");
    expect(refused(() => parseChatRequest(chat({ max_tokens: 0 })))).toBe("max_tokens");
    expect(parseChatRequest(chat({ temperature: 2, top_p: 1 })).temperature).toBe(2);
    expect(refused(() => parseChatRequest(chat({ temperature: 2.01 })))).toBe("temperature");
    expect(refused(() => parseChatRequest(chat({ top_p: -0.1 })))).toBe("top_p");
    expect(refused(() => parseChatRequest(chat({ seed: 2 ** 31 })))).toBe("seed");
    expect(refused(() => parseChatRequest(chat({ n: 2 })))).toBe("n");
    expect(refused(() => parseChatRequest({ model: "x".repeat(b.modelChars + 1), messages: [msg] }))).toBe("model");
    expect(refused(() => parseChatRequest({ model: "m", messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }))).toBe("messages[0].content[0].type");
    expect(refused(() => parseChatRequest({ model: "m", messages: [{ role: "user" }] }))).toBe("messages[0].content");
    expect(parseChatRequest({ model: "m", messages: [{ role: "assistant", content: null, tool_calls: [{ id: "1" }] }] }).messages[0]?.toolCalls).toBe('[{"id":"1"}]');
    expect(refused(() => parseChatRequest([]))).toBe("body");
  });

  it("completions, embeddings, speech, images, transcriptions", () => {
    expect(parseCompletionRequest({ model: "m", prompt: Array.from({ length: b.prompts }, () => "p") }).prompts).toHaveLength(b.prompts);
    expect(refused(() => parseCompletionRequest({ model: "m", prompt: Array.from({ length: b.prompts + 1 }, () => "p") }))).toBe("prompt");
    expect(refused(() => parseCompletionRequest({ model: "m", prompt: ["a", "b"], stream: true }))).toBe("prompt");
    expect(parseEmbeddingRequest({ model: "m", input: Array.from({ length: b.embeddingInputs }, () => "t") }).inputs).toHaveLength(b.embeddingInputs);
    expect(refused(() => parseEmbeddingRequest({ model: "m", input: Array.from({ length: b.embeddingInputs + 1 }, () => "t") }))).toBe("input");
    expect(parseEmbeddingRequest({ model: "m", input: [1, 2, 3] }).inputs).toEqual([{ tokens: [1, 2, 3] }]);
    expect(refused(() => parseEmbeddingRequest({ model: "m", input: [[1], [-1]] }))).toBe("input[1][0]");
    expect(refused(() => parseEmbeddingRequest({ model: "m", input: "x", encoding_format: "hex" }))).toBe("encoding_format");
    expect(parseSpeechRequest({ model: "m", input: "x".repeat(b.speechChars) }).format).toBe("wav");
    expect(refused(() => parseSpeechRequest({ model: "m", input: "x".repeat(b.speechChars + 1) }))).toBe("input");
    expect(refused(() => parseSpeechRequest({ model: "m", input: "x", response_format: "mp3" }))).toBe("response_format");
    expect(parseEmbeddingRequest({ model: "m", input: "x", dimensions: b.embeddingDimensions }).dimensions).toBe(b.embeddingDimensions);
    expect(refused(() => parseEmbeddingRequest({ model: "m", input: "x", dimensions: b.embeddingDimensions + 1 }))).toBe("dimensions");
    expect(refused(() => parseEmbeddingRequest({ model: "m", input: ["a", null] }))).toBe("input[1]");
    expect(parseSpeechRequest({ model: "m", input: "x", voice: "en_US-amy-medium" }).voice).toBe("en_US-amy-medium");
    for (const voice of ["/etc/passwd", "../voices/x.wav", "a/b", ".."]) expect(refused(() => parseSpeechRequest({ model: "m", input: "x", voice }))).toBe("voice");
    expect(parseImageRequest({ model: "m", prompt: "p", size: `${String(b.imageSide)}x1`, n: b.images }).width).toBe(b.imageSide);
    expect(refused(() => parseImageRequest({ model: "m", prompt: "p", size: `${String(b.imageSide + 1)}x1` }))).toBe("size");
    expect(refused(() => parseImageRequest({ model: "m", prompt: "p", n: b.images + 1 }))).toBe("n");
    expect(refused(() => parseImageRequest({ model: "m", prompt: "p", response_format: "url" }))).toBe("response_format");
    expect(parseTranscriptionFields({ model: "m", temperature: "1" }).temperature).toBe(1);
    expect(refused(() => parseTranscriptionFields({ model: "m", temperature: "1.5" }))).toBe("temperature");
    expect(refused(() => parseTranscriptionFields({ model: "m", response_format: "srt" }))).toBe("response_format");
    expect(refused(() => parseTranscriptionFields({}))).toBe("model");
  });
});

describe("an absent required field: 400 naming it, OpenAI's code missing_required_parameter", () => {
  it("model, messages, a message's role and content, prompt, input", () => {
    const missingOf = (fn: () => unknown): unknown => {
      try {
        fn();
      } catch (err) {
        const e = WardenError.from(err);
        return [e.details["field"], e.details["openAiCode"], e.rawMessage];
      }
      throw new Error("accepted");
    };
    expect(missingOf(() => parseChatRequest({ messages: [msg] }))).toEqual(["model", "missing_required_parameter", "model: is required"]);
    expect(missingOf(() => parseChatRequest({ model: "m" }))).toEqual(["messages", "missing_required_parameter", "messages: is required"]);
    expect(missingOf(() => parseChatRequest({ model: "m", messages: [{ content: "x" }] }))).toEqual(["messages[0].role", "missing_required_parameter", "messages[0].role: is required"]);
    expect(missingOf(() => parseChatRequest({ model: "m", messages: [{ role: "user" }] }))).toEqual(["messages[0].content", "missing_required_parameter", "messages[0].content: is required"]);
    expect(missingOf(() => parseCompletionRequest({ model: "m" }))).toEqual(["prompt", "missing_required_parameter", "prompt: is required"]);
    expect(missingOf(() => parseEmbeddingRequest({ model: "m" }))).toEqual(["input", "missing_required_parameter", "input: is required"]);
  });
});
