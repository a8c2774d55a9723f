import { loadDefaults, type LoadSettings } from "@warden/common";
import type { ModelOptions } from "@warden/proto";

/** What the agent knows when it sends LoadModel. */
export interface LoadModelInput {
  /** Warden's model id: ModelOptions.Model when no backendModel is set. */
  readonly model: string;
  /** Absolute, already resolved and confined (model-file.ts); "" = none. */
  readonly modelFile: string;
  /** 0 = LocalAI's default. */
  readonly contextSize: number;
  readonly options: readonly string[];
  readonly load: LoadSettings;
  /** The agent's modelsPath, sent as ModelPath ("" when unset). */
  readonly modelsPath: string;
  /** Threads when the model sets none: the node's CPU count. */
  readonly cpuCount: number;
}

/** The ModelOptions fields the agent fills (names and numbers: proto/backend/backend.proto). */
export type LoadModelFields = Pick<ModelOptions, "Model" | "ModelFile" | "ModelPath" | "ContextSize" | "NBatch" | "NGPULayers" | "Threads" | "MMap" | "FlashAttention" | "CUDA" | "Options">;

/** The identity a backend checks requests against: the name it was loaded with. */
export function identityOf(model: string, load: LoadSettings): string {
  return load.backendModel ?? model;
}

/**
 * ModelOptions as LocalAI's core sends them (core/backend/options.go
 * grpcModelOpts): every typed field filled, LocalAI's default where the model
 * config leaves one unset, so llama-cpp puts every layer on the GPU unless told
 * otherwise. Options pass through unchanged.
 */
export function loadModelFields(i: LoadModelInput): LoadModelFields {
  return {
    Model: identityOf(i.model, i.load),
    ModelFile: i.modelFile,
    ModelPath: i.modelsPath,
    ContextSize: i.contextSize > 0 ? i.contextSize : loadDefaults.contextSize,
    NBatch: i.load.batch ?? loadDefaults.batch,
    NGPULayers: i.load.gpuLayers ?? loadDefaults.gpuLayers,
    Threads: i.load.threads ?? Math.max(1, i.cpuCount),
    MMap: i.load.mmap ?? loadDefaults.mmap,
    FlashAttention: i.load.flashAttention ?? loadDefaults.flashAttention,
    CUDA: i.load.cuda ?? loadDefaults.cuda,
    Options: [...i.options],
  };
}
