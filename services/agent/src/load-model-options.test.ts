import { describe, expect, it } from "vitest";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { ModelOptionsSchema } from "@warden/proto";
import { loadModelFields } from "./load-model-options.js";

const input = { model: "qwen", modelFile: "/srv/models/q.gguf", contextSize: 0, options: ["cache_type_k:q8_0"], load: {}, modelsPath: "/srv/models", cpuCount: 8 };

describe("loadModelFields", () => {
  it("fills LocalAI's defaults: every layer on the GPU, 512 batch, 4096 context, mmap on, flash attention auto, one thread per CPU", () => {
    expect(loadModelFields(input)).toEqual({
      Model: "qwen", ModelFile: "/srv/models/q.gguf", ModelPath: "/srv/models", ContextSize: 4096, NBatch: 512, NGPULayers: 99_999_999, Threads: 8, MMap: true, FlashAttention: "auto", CUDA: false, Options: ["cache_type_k:q8_0"],
    });
  });

  it("sends the typed fields and the backend-facing name when set", () => {
    const f = loadModelFields({ ...input, contextSize: 8192, load: { backendModel: "Qwen/Qwen2-0.5B", gpuLayers: 0, threads: 2, batch: 64, mmap: false, flashAttention: "off", cuda: true } });
    expect(f).toMatchObject({ Model: "Qwen/Qwen2-0.5B", ContextSize: 8192, NGPULayers: 0, Threads: 2, NBatch: 64, MMap: false, FlashAttention: "off", CUDA: true });
  });

  it("round-trips through the wire message at upstream's field numbers", () => {
    const bytes = toBinary(ModelOptionsSchema, create(ModelOptionsSchema, loadModelFields({ ...input, load: { mmap: true, gpuLayers: 33 } })));
    const back = fromBinary(ModelOptionsSchema, bytes);
    expect(back).toMatchObject({ Model: "qwen", ModelFile: "/srv/models/q.gguf", ModelPath: "/srv/models", NGPULayers: 33, Threads: 8, NBatch: 512, ContextSize: 4096, MMap: true, FlashAttention: "auto" });
  });
});
