import type { Loader } from "@warden/loader";
import type { BackendClientHandle } from "../backend-connector.js";

/** One instance of a model, as `/v1/models` shows it in Warden's extension field. */
export interface WardenInstanceJson {
  readonly node_id: string;
  readonly incarnation: string;
  /** loading | ready | freed | pending_eviction */
  readonly state: string;
  readonly in_flight: number;
}

/** OpenAI's model object plus `warden`: whether and where it is loaded. */
export interface OpenAiModelJson {
  readonly id: string;
  readonly object: "model";
  readonly created: number;
  readonly owned_by: string;
  readonly warden: {
    readonly backend: string;
    /** loaded (a ready instance), loading, or not_loaded. */
    readonly state: "loaded" | "loading" | "not_loaded";
    readonly pinned: boolean;
    readonly groups: readonly string[];
    readonly instances: readonly WardenInstanceJson[];
  };
}

/** The configured models with their live state (one snapshot: consistent across models). */
export function listOpenAiModels(loader: Loader<BackendClientHandle>): { object: "list"; data: OpenAiModelJson[] } {
  const byModel = new Map<string, WardenInstanceJson[]>();
  for (const v of loader.snapshot().instances) {
    const list = byModel.get(v.model) ?? [];
    list.push({ node_id: v.nodeId, incarnation: v.incarnation, state: v.pendingEviction !== undefined ? "pending_eviction" : v.state, in_flight: v.inFlight });
    byModel.set(v.model, list);
  }
  const data = loader.modelSpecs().map((m): OpenAiModelJson => {
    const instances = byModel.get(m.id) ?? [];
    const state = instances.some((i) => i.state === "ready") ? "loaded" : instances.some((i) => i.state === "loading") ? "loading" : "not_loaded";
    return { id: m.id, object: "model", created: 0, owned_by: "warden", warden: { backend: m.backend, state, pinned: m.pinned, groups: [...m.groups], instances } };
  });
  return { object: "list", data };
}
