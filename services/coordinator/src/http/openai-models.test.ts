import { describe, expect, it } from "vitest";
import { defaultReplicas, modelSpec, type ReplicaStatus } from "@warden/loader";
import { ModelFirstSeen, listOpenAiModels } from "./openai-models.js";

const status = (model: string, over: Partial<ReplicaStatus> = {}): ReplicaStatus => ({ model, settings: defaultReplicas, desired: 0, ready: 0, loading: 0, stopping: 0, leftovers: 0, queued: 0, blocked: undefined, ...over });

describe("/v1/models: the warden extension's replicas", () => {
  it("carries each model's replica summary, the breaker's retry relative to now", () => {
    const loader = {
      snapshot: () => ({ instances: [], leftovers: [] }),
      modelSpecs: () => [modelSpec({ id: "chat", backend: "sim" }), modelSpec({ id: "solo", backend: "sim" })],
      replicaStatuses: () => [status("chat", { settings: { ...defaultReplicas, min: 1, max: 4 }, desired: 2, ready: 1, loading: 1, queued: 3, blocked: { error: "no fit", failures: 2, retryAtMs: 10_500 } }), status("solo")],
    };
    const r = listOpenAiModels(loader, 10_000, () => 1_700_000_000);
    expect(r.data.map((m) => [m.id, m.warden.replicas])).toEqual([
      ["chat", { min: 1, max: 4, desired: 2, ready: 1, loading: 1, stopping: 0, leftovers: 0, queued: 3, blocked: { error: "no fit", failures: 2, retry_after_ms: 500 } }],
      ["solo", { min: 0, max: 1, desired: 0, ready: 0, loading: 0, stopping: 0, leftovers: 0, queued: 0, blocked: null }],
    ]);
    expect(listOpenAiModels(loader, 20_000, () => 1_700_000_000).data[0]?.warden.replicas?.blocked?.retry_after_ms).toBe(0);
  });
});

describe("a model's created: when this coordinator first saw it", () => {
  it("is the first sight in whole seconds, stable after; a model no longer configured is forgotten and seen anew", () => {
    let nowMs = 1_700_000_000_900;
    const seen = new ModelFirstSeen(() => nowMs);
    expect(seen.of("a")).toBe(1_700_000_000);
    nowMs += 60_000;
    expect([seen.of("a"), seen.of("b")]).toEqual([1_700_000_000, 1_700_000_060]);
    seen.retain(new Set(["b"]));
    nowMs += 60_000;
    expect([seen.of("a"), seen.of("b")]).toEqual([1_700_000_120, 1_700_000_060]);
  });
});
