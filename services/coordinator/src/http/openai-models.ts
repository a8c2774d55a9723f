import type { Loader, ReplicaStatus } from "@warden/loader";
import type { BackendClientHandle } from "../routing/backend-connector.js";

/** One instance of a model, as `/v1/models` shows it in Warden's extension field. */
export interface WardenInstanceJson {
  readonly node_id: string;
  readonly incarnation: string;
  /** loading | ready | freed | pending_eviction */
  readonly state: string;
  readonly in_flight: number;
}

/** A model's replicas (issue 16), as `/v1/models` shows them. */
export interface WardenReplicasJson {
  readonly min: number;
  readonly max: number;
  readonly desired: number;
  readonly ready: number;
  readonly loading: number;
  readonly stopping: number;
  readonly leftovers: number;
  readonly queued: number;
  /** The scale-up circuit breaker while open; null when closed. */
  readonly blocked: { readonly error: string; readonly failures: number; readonly retry_after_ms: number } | null;
}

function replicasJson(s: ReplicaStatus, nowMs: number): WardenReplicasJson {
  const b = s.blocked;
  return {
    min: s.settings.min,
    max: s.settings.max,
    desired: s.desired,
    ready: s.ready,
    loading: s.loading,
    stopping: s.stopping,
    leftovers: s.leftovers,
    queued: s.queued,
    blocked: b === undefined ? null : { error: b.error, failures: b.failures, retry_after_ms: Math.max(0, Math.ceil(b.retryAtMs - nowMs)) },
  };
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
    /** Absent only when the loader reports nothing for the model. */
    readonly replicas?: WardenReplicasJson;
  };
}

/** The configured models with their live state (one snapshot: consistent across models). */
export function listOpenAiModels(loader: Pick<Loader<BackendClientHandle>, "snapshot" | "modelSpecs" | "replicaStatuses">, nowMs: number): { object: "list"; data: OpenAiModelJson[] } {
  const byModel = new Map<string, WardenInstanceJson[]>();
  for (const v of loader.snapshot().instances) {
    const list = byModel.get(v.model) ?? [];
    list.push({ node_id: v.nodeId, incarnation: v.incarnation, state: v.pendingEviction !== undefined ? "pending_eviction" : v.state, in_flight: v.inFlight });
    byModel.set(v.model, list);
  }
  const replicas = new Map<string, WardenReplicasJson>(loader.replicaStatuses().map((r): [string, WardenReplicasJson] => [r.model, replicasJson(r, nowMs)]));
  const data = loader.modelSpecs().map((m): OpenAiModelJson => {
    const instances = byModel.get(m.id) ?? [];
    const state = instances.some((i) => i.state === "ready") ? "loaded" : instances.some((i) => i.state === "loading") ? "loading" : "not_loaded";
    const r = replicas.get(m.id);
    return { id: m.id, object: "model", created: 0, owned_by: "warden", warden: { backend: m.backend, state, pinned: m.pinned, groups: [...m.groups], instances, ...(r === undefined ? {} : { replicas: r }) } };
  });
  return { object: "list", data };
}
