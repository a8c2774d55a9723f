import type { LoaderState } from "./loader-state.js";
import { isStale } from "./load-digest.js";
import type { ModelSpec } from "./model-spec.js";
import type { BackendHandle } from "./ports.js";
import type { ReplicaStatus } from "./replica-status.js";

/**
 * One model's replica counts, from the watchdog's per-model records and the
 * held table — O(replicas of that model) when they changed since the last
 * read, else O(1) (replica-counts.ts). `leftovers` is passed in so that
 * listing every model counts the leftovers once. Undefined for a model that
 * is not configured.
 */
export function replicaStatusOf<H extends BackendHandle>(s: LoaderState<H>, model: string, leftovers: number): ReplicaStatus | undefined {
  const spec = s.models.get(model);
  if (spec === undefined) return undefined;
  const counts = s.replicaCounts.counts(s, model);
  const { ready, stopping } = counts;
  let loading = counts.loading;
  const admitting = s.loadIncarnations.get(model);
  if (admitting !== undefined && s.core.stateOf(admitting) === undefined && !s.held.has(admitting)) loading++;
  const { min, max } = spec.replicas;
  const b = s.breakers.state(model);
  const run = s.rollouts.get(model);
  return {
    model,
    settings: spec.replicas,
    desired: Math.min(max, Math.max(min, ready + loading)),
    ready,
    loading,
    stopping,
    leftovers,
    queued: s.waiting.get(model) ?? 0,
    blocked: b === undefined ? undefined : { error: b.error, failures: b.failures, retryAtMs: b.retryAtMs },
    ...(run === undefined ? {} : { rollout: { ...rolloutCounts(s, spec), keep: run.keep } }),
  };
}

/** Ready replicas with `spec`'s load settings, and replicas not being stopped with older ones: O(replicas of the model). */
function rolloutCounts<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec): { current: number; stale: number } {
  let current = 0;
  let stale = 0;
  for (const inc of s.replicas.of(spec.id)) {
    const h = s.held.get(inc);
    const state = s.core.stateOf(inc);
    if (h === undefined || state === "pending" || state === "freed") continue;
    if (isStale(h, spec, s.o.agents)) stale++;
    else if (h.phase === "ready" && state === "ready") current++;
  }
  return { current, stale };
}

/** Every configured model's replica counts, in config order. */
export function replicaStatusesOf<H extends BackendHandle>(s: LoaderState<H>): ReplicaStatus[] {
  const leftovers = new Map<string, number>();
  for (const l of s.leftovers.list()) leftovers.set(l.model, (leftovers.get(l.model) ?? 0) + 1);
  const out: ReplicaStatus[] = [];
  s.replicaCounts.retain(s.models);
  for (const id of s.models.keys()) {
    const st = replicaStatusOf(s, id, leftovers.get(id) ?? 0);
    if (st !== undefined) out.push(st);
  }
  return out;
}
