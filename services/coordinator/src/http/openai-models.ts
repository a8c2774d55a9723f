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

/** A model's replicas, as `/v1/models` shows them. */
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

type ModelsLoader = Pick<Loader<BackendClientHandle>, "snapshot" | "modelSpecs" | "replicaStatuses">;

/**
 * A model's `created` (Unix seconds): when this coordinator first saw it
 * configured — at start for the models configured then, else at the first
 * API call that found it (after a reload or an Admin API change). It is not
 * kept across restarts: a restarted coordinator's models are "created" at its
 * start. Entries live as long as their model is configured (`retain`).
 */
export class ModelFirstSeen {
  private readonly seenSec = new Map<string, number>();

  constructor(private readonly wallNowMs: () => number) {}

  /** The first-seen time of `id`, now if never seen (call only for a configured id). */
  of(id: string): number {
    let t = this.seenSec.get(id);
    if (t === undefined) {
      t = Math.floor(this.wallNowMs() / 1000);
      this.seenSec.set(id, t);
    }
    return t;
  }

  /** Forgets models no longer configured (a model removed and added again is seen anew). */
  retain(ids: ReadonlySet<string>): void {
    for (const id of this.seenSec.keys()) if (!ids.has(id)) this.seenSec.delete(id);
  }
}

/** The configured models with their live state (one snapshot: consistent across models); `only`: one model's entry. */
export function listOpenAiModels(loader: ModelsLoader, nowMs: number, createdOf: (id: string) => number, only?: string): { object: "list"; data: OpenAiModelJson[] } {
  const byModel = new Map<string, WardenInstanceJson[]>();
  for (const v of loader.snapshot().instances) {
    if (only !== undefined && v.model !== only) continue;
    const list = byModel.get(v.model) ?? [];
    list.push({ node_id: v.nodeId, incarnation: v.incarnation, state: v.pendingEviction !== undefined ? "pending_eviction" : v.state, in_flight: v.inFlight });
    byModel.set(v.model, list);
  }
  const replicas = new Map<string, WardenReplicasJson>(loader.replicaStatuses().map((r): [string, WardenReplicasJson] => [r.model, replicasJson(r, nowMs)]));
  const data = loader
    .modelSpecs()
    .filter((m) => only === undefined || m.id === only)
    .map((m): OpenAiModelJson => {
      const instances = byModel.get(m.id) ?? [];
      const state = instances.some((i) => i.state === "ready") ? "loaded" : instances.some((i) => i.state === "loading") ? "loading" : "not_loaded";
      const r = replicas.get(m.id);
      return { id: m.id, object: "model", created: createdOf(m.id), owned_by: "warden", warden: { backend: m.backend, state, pinned: m.pinned, groups: [...m.groups], instances, ...(r === undefined ? {} : { replicas: r }) } };
    });
  return { object: "list", data };
}
