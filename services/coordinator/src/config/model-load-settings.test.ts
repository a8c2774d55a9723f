import { describe, expect, it } from "vitest";
import { Code, isWardenError } from "@warden/common";
import { resolveCoordinatorConfig } from "./coordinator-config.js";

function errorOf(model: Record<string, unknown>): string {
  try {
    resolveCoordinatorConfig({ models: [{ id: "m", backend: "llama-cpp", ...model }] });
  } catch (err) {
    if (isWardenError(err, Code.InvalidArgument)) return err.rawMessage;
    throw err;
  }
  throw new Error("expected INVALID_ARGUMENT");
}

describe("models[]: the typed LoadModel fields", () => {
  it("reads them, leaving unset ones unset (the agent applies LocalAI's defaults)", () => {
    const c = resolveCoordinatorConfig({
      models: [
        { id: "qwen", backend: "transformers", backendModel: "Qwen/Qwen2-0.5B", gpuLayers: 0, threads: 8, batch: 256, mmap: false, flashAttention: "on", cuda: true, modelFile: "qwen/q.gguf" },
        { id: "plain", backend: "llama-cpp" },
      ],
    });
    expect(c.models[0]?.load).toEqual({ backendModel: "Qwen/Qwen2-0.5B", gpuLayers: 0, threads: 8, batch: 256, mmap: false, flashAttention: "on", cuda: true });
    expect(c.models[0]?.modelFile).toBe("qwen/q.gguf");
    expect(c.models[1]?.load).toEqual({});
  });

  it("refuses out-of-bounds and malformed values, naming the field", () => {
    expect(errorOf({ gpuLayers: -1 })).toMatch(/^models\[0\]\.gpuLayers: must be an integer in 0\.\.99999999/);
    expect(errorOf({ gpuLayers: 1.5 })).toMatch(/^models\[0\]\.gpuLayers: must be an integer/);
    expect(errorOf({ threads: 0 })).toMatch(/^models\[0\]\.threads: must be an integer in 1\.\.4096/);
    expect(errorOf({ batch: 2_000_000 })).toMatch(/^models\[0\]\.batch: must be an integer in 1\.\.1048576/);
    expect(errorOf({ mmap: "yes" })).toMatch(/^models\[0\]\.mmap: must be true or false/);
    expect(errorOf({ flashAttention: "maybe" })).toMatch(/^models\[0\]\.flashAttention: must be one of auto, on, off/);
    expect(errorOf({ backendModel: "../etc" })).toMatch(/^models\[0\]\.backendModel: must not contain an empty, "\." or "\.\." path segment/);
    expect(errorOf({ backendModel: "/abs" })).toMatch(/^models\[0\]\.backendModel: must not start with "-" or "\/"/);
    expect(errorOf({ backendModel: "--help" })).toMatch(/must not start with "-"/);
    expect(errorOf({ backendModel: "a b" })).toMatch(/^models\[0\]\.backendModel: must be 1\.\.256 characters of/);
    expect(errorOf({ backendModel: "x".repeat(257) })).toMatch(/must be 1\.\.256 characters/);
    expect(errorOf({ modelFile: "a/../../b" })).toMatch(/^models\[0\]\.modelFile: must not contain a "\.\." segment/);
    expect(errorOf({ modelFile: "a\u0001" })).toMatch(/^models\[0\]\.modelFile: must be at most 4096 characters without control characters/);
  });
});
