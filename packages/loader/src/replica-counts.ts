import type { LoaderState } from "./loader-state.js";
import type { BackendHandle } from "./ports.js";

/** One model's replicas by state, from the watchdog's records and the held table. */
export interface ReplicaCounts {
  /** Ready in the watchdog and held ready. */
  readonly ready: number;
  /** Reserved, loading, or ready but not held ready yet; held and not (or no longer) in the watchdog. */
  readonly loading: number;
  /** Pending eviction or freed. */
  readonly stopping: number;
}

/**
 * Counts one model's replicas now: O(replicas of that model). The admitting
 * load (minted, not held, not in the watchdog) is not counted here: it is
 * O(1) and read on every call (replica-status-of.ts).
 */
export function countReplicas<H extends BackendHandle>(s: Pick<LoaderState<H>, "core" | "held" | "replicas">, model: string): ReplicaCounts {
  let ready = 0;
  let loading = 0;
  let stopping = 0;
  // States only, no views.
  s.core.forEachOfModel(model, (incarnation, state) => {
    if (state === "pending" || state === "freed") stopping++;
    else if (state === "ready" && s.held.get(incarnation)?.phase === "ready") ready++;
    else loading++;
  });
  // Held but not (or no longer) in the watchdog: a start not admitted yet counts as loading. (An incarnation is one model's.)
  for (const inc of s.replicas.of(model)) if (s.core.stateOf(inc) === undefined) loading++;
  return { ready, loading, stopping };
}

interface Counted extends ReplicaCounts {
  readonly coreVersion: number;
  readonly heldVersion: number;
}

/**
 * Each model's replica counts, kept until they can have changed: the counts
 * read only the model's watchdog records (their states) and its held
 * replicas (their phases), and both sides say when those change — the
 * core's `modelVersion` and the replica index's `countsVersion` (bumped by
 * every add, remove, transition and `setPhase`). A ListModels first page or
 * a scrape then costs O(models), not O(every instance), while nothing moves;
 * a model that changed is counted again, alone. No clock: equal versions,
 * equal counts. Bounded by the model table (`retain`).
 */
export class ReplicaCountCache {
  private readonly byModel = new Map<string, Counted>();

  counts<H extends BackendHandle>(s: Pick<LoaderState<H>, "core" | "held" | "replicas">, model: string): ReplicaCounts {
    const coreVersion = s.core.modelVersion(model);
    const heldVersion = s.replicas.countsVersion(model);
    const hit = this.byModel.get(model);
    if (hit !== undefined && hit.coreVersion === coreVersion && hit.heldVersion === heldVersion) return hit;
    const c: Counted = { ...countReplicas(s, model), coreVersion, heldVersion };
    this.byModel.set(model, c);
    return c;
  }

  /** Forgets models no longer configured (a config reload removed them). */
  retain(models: ReadonlyMap<string, unknown>): void {
    if (this.byModel.size <= models.size) return;
    for (const m of this.byModel.keys()) if (!models.has(m)) this.byModel.delete(m);
  }
}
