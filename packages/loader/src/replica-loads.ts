import { Code, WardenError } from "@warden/common";
import { startLoad, type ReplicaLoad } from "./load-path.js";
import { warn, type LoaderState } from "./loader-state.js";
import type { ModelSpec } from "./model-spec.js";
import type { BackendHandle } from "./ports.js";
import type { ReplicaChoice } from "./replica-routing.js";

/**
 * Starts one replica load of `spec` — a normal load through
 * placement, admission and eviction, the model's one load in flight — for
 * the min floor (`min`) or because every ready replica is at its target
 * (`in-flight`), or to replace a replica on a draining node (`drain`,
 * drain-node.ts) or one with older load settings (`rollout`, replica-tick.ts). A failure opens the model's circuit breaker
 * (scale-breaker.ts) and emits `replica.scale-blocked` once per failure; a
 * success closes it. Resolves with how it ended; only the drain awaits it:
 * calls keep going to the existing replicas.
 */
/** `deferred`: not needed any more, deferred (a node has no inventory yet) or cancelled by shutdown — no breaker. */
export type ReplicaLoadOutcome = "ready" | "failed" | "deferred";

export function startReplicaLoad<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec, cause: ReplicaLoad["cause"], drainUpTo = 0): Promise<ReplicaLoadOutcome> {
  // A drain's replacement may run beside the replica it replaces: its bound is the count it started from, plus one.
  // So may a rollout's replacement (its bound: the count the rollout keeps, plus one).
  const upTo = cause === "min" ? spec.replicas.min : cause === "drain" || cause === "rollout" ? drainUpTo : spec.replicas.max;
  return startLoad(s, spec, undefined, { cause, upTo }).then(
    () => {
      s.breakers.close(spec.id);
      return "ready" as const;
    },
    (err: unknown) => {
      const e = WardenError.from(err);
      // Not needed any more, or cancelled by shutdown: not a failure to place.
      if (e.code === Code.Aborted || s.closed) return "deferred" as const;
      const b = s.breakers.fail(spec.id, e.rawMessage, s.o.clock.now());
      warn(s, "replica load failed; scale-up blocked", { model: spec.id, cause, err: e.rawMessage, retryAfterMs: b.retryAfterMs });
      s.o.events.emit({ type: "replica.scale-blocked", nodeId: "", model: spec.id, address: "", incarnation: "", error: e.rawMessage, failures: b.failures, retryAfterMs: b.retryAfterMs });
      return "failed" as const;
    },
  );
}

/**
 * Scale-up on load: when the least-loaded ready replica
 * already has `targetInFlight` calls in flight — so every ready one has — and
 * fewer than `max` replicas count (those being stopped included: a failed
 * stop brings one back), start one replica load unless one is in
 * flight, the breaker is open or the model is in load-failure cooldown. The
 * call that noticed goes on to the least-loaded replica.
 */
export function maybeScaleUp<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec, c: ReplicaChoice<H>): void {
  const r = spec.replicas;
  if (c.best === undefined || c.bestInFlight < r.targetInFlight || c.live + c.stopping >= r.max || s.closed) return;
  if (s.loads.has(spec.id)) return;
  const now = s.o.clock.now();
  if (!s.breakers.allows(spec.id, now) || s.cooldown.retryAfterMs(spec.id, now) > 0) return;
  void startReplicaLoad(s, spec, "in-flight");
}
