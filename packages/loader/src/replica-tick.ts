import type { ModelRule } from "@warden/watchdog";
import { warn, type LoaderState } from "./loader-state.js";
import { isStale } from "./load-digest.js";
import type { ModelSpec } from "./model-spec.js";
import type { BackendHandle } from "./ports.js";
import { decideReplicas, rolloutKeep, type AboveMaxView, type ReplicaView, type RolloutView } from "./replica-reconciler.js";
import { startReplicaLoad } from "./replica-loads.js";
import { chooseReplica } from "./replica-routing.js";
import { stopInstance } from "./unload.js";

/**
 * One reconciler pass (runs on the loader's tick, after the watchdog's):
 * restores `min`, scales idle replicas down (reason `scale-down`, through the
 * normal stop sequence, announced by `replica.scaled-down` cause `idle`
 * first), stops the replicas above a lowered `max` at once (the same, cause
 * `max`), and rolls
 * out changed load settings one replica at a time (a replacement announced by
 * `replica.scaled-up` cause `rollout`, then the stale replica stopped with
 * reason `rollout`). Looks only
 * at the models whose replica picture changed or whose own timer is due
 * (replica-work.ts), in model-table order: the same decisions as a pass over
 * every model ({@link reconcileEveryModel}), for work proportional to change.
 * Never awaits a stop or a load.
 */
export function reconcileReplicas<H extends BackendHandle>(s: LoaderState<H>): void {
  if (s.closed) return;
  const nowMs = s.o.clock.now();
  const specs = s.replicaWork.take(
    {
      models: s.models,
      takeCoreChanges: () => s.core.takeChangedModels(),
      takeLoaderChanges: () => [...s.replicas.takeChanged(), ...s.unconfirmed.takeChanged(), ...s.breakers.takeChanged()],
    },
    nowMs,
  );
  for (const spec of specs) {
    const wakeAtMs = reconcileModel(s, spec, nowMs);
    if (wakeAtMs === "decided") s.replicaWork.decided(spec.id);
    else s.replicaWork.idle(spec.id, wakeAtMs);
  }
}

/** The same pass over every configured model: the reference the change-driven pass is checked against (tests). */
export function reconcileEveryModel<H extends BackendHandle>(s: LoaderState<H>): void {
  if (s.closed) return;
  const nowMs = s.o.clock.now();
  for (const spec of s.models.values()) reconcileModel(s, spec, nowMs);
}

/**
 * Decides for one model and acts. Returns "decided" when it started a load or
 * a scale-down, else when time alone could change its decision: the breaker
 * letting a load start, or the next idle replica reaching `scaleDownAfter`
 * (undefined: only a change can). A model with min 0 and at most one replica
 * costs one lookup.
 */
function reconcileModel<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec, nowMs: number): number | undefined | "decided" {
  if (spec.replicas.min === 0 && s.replicas.count(spec.id) <= 1 && !oneIsStale(s, spec)) {
    endRollout(s, spec.id);
    return undefined;
  }
  const v = viewOf(s, spec, nowMs);
  const d = decideReplicas(v);
  if (d.t === "load") {
    void startReplicaLoad(s, spec, "min");
    return "decided";
  }
  if (d.t === "rollout-load") {
    void startReplicaLoad(s, spec, "rollout", d.upTo);
    return "decided";
  }
  if (d.t === "rollout-stop") {
    const run = s.rollouts.get(spec.id);
    if (run !== undefined) run.replaced++;
    void stopInstance(s, d.incarnation, { force: false, reason: "rollout" }).catch((err: unknown) => {
      warn(s, "rollout stop failed", { model: spec.id, incarnation: d.incarnation, err: String(err) });
    });
    return "decided";
  }
  if (d.t === "scale-down" || d.t === "above-max") {
    const h = s.held.get(d.incarnation);
    if (h === undefined) return "decided";
    const live = chooseReplica(s, spec.id).live;
    const cause = d.t === "above-max" ? "max" : "idle";
    s.o.events.emit({ type: "replica.scaled-down", nodeId: h.nodeId, model: spec.id, address: h.address ?? "", incarnation: h.incarnation, replicas: live - 1, cause });
    void stopInstance(s, d.incarnation, { force: false, reason: "scale-down" }).catch((err: unknown) => {
      warn(s, "scale-down stop failed", { model: spec.id, incarnation: d.incarnation, err: String(err) });
    });
    return "decided";
  }
  let wakeAtMs: number | undefined;
  const retryAtMs = s.breakers.state(spec.id)?.retryAtMs;
  if (!v.breakerAllows && retryAtMs !== undefined) wakeAtMs = retryAtMs;
  for (const r of v.idle) {
    const at = r.idleSinceMs + v.scaleDownAfterMs;
    if (at > nowMs && (wakeAtMs === undefined || at < wakeAtMs)) wakeAtMs = at;
  }
  return wakeAtMs;
}

/** What the decision needs about the model's replicas: O(its replicas), no per-replica copies. */
function viewOf<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec, nowMs: number): ReplicaView {
  const idle: { incarnation: string; idleSinceMs: number }[] = [];
  const staleIdle: { incarnation: string; idleSinceMs: number }[] = [];
  const settled: { incarnation: string; inFlight: number; lastUsedMs: number }[] = [];
  let ready = 0;
  let stale = 0;
  for (const inc of s.replicas.of(spec.id)) {
    const h = s.held.get(inc);
    if (h === undefined || h.phase !== "ready" || s.core.stateOf(inc) !== "ready") continue;
    ready++;
    if (h.address !== undefined && s.o.agents.isReachable?.(h.nodeId) !== false) {
      settled.push({ incarnation: inc, inFlight: s.core.inFlight(h.address), lastUsedMs: s.core.lastUsedMs(h.address) ?? -Infinity });
    }
    const stale1 = isStale(h, spec, s.o.agents);
    if (stale1) stale++;
    const idleSinceMs = s.core.idleSinceMs(inc);
    if (idleSinceMs === undefined) continue;
    idle.push({ incarnation: inc, idleSinceMs });
    if (stale1) staleIdle.push({ incarnation: inc, idleSinceMs });
  }
  const c = chooseReplica(s, spec.id);
  let rollout: RolloutView | undefined;
  if (stale === 0) endRollout(s, spec.id);
  else {
    const run = s.rollouts.get(spec.id);
    const keep = rolloutKeep(run?.keep, c.live, spec.replicas.min, spec.replicas.max);
    if (run === undefined) {
      s.rollouts.set(spec.id, { keep, replaced: 0 });
      s.o.events.emit({ type: "rollout.started", nodeId: "", model: spec.id, address: "", incarnation: "", stale, keep });
    } else run.keep = keep;
    rollout = { keep, staleIdle, freshReady: ready - stale };
  }
  // Counted toward max but not ready: loading, in admission, journal-only (chooseReplica's live counts them all).
  const aboveMax: AboveMaxView = { settled, unsettled: c.live - ready, moving: s.drains.moving(spec.id), recovered: s.admissionOpen };
  return {
    min: spec.replicas.min,
    max: spec.replicas.max,
    scaleDownAfterMs: spec.replicas.scaleDownAfterMs,
    live: c.live,
    stopping: c.stopping,
    ready,
    loadInFlight: s.loads.has(spec.id),
    breakerAllows: s.breakers.allows(spec.id, nowMs),
    idle,
    nowMs,
    ...(rollout === undefined ? {} : { rollout }),
    aboveMax,
  };
}

/**
 * The model's rollout is over (no replica runs older load settings, or the
 * model left the config): `rollout.finished` with how many stale replicas it
 * stopped and how many are ready now. Nothing when none was in progress.
 */
export function endRollout<H extends BackendHandle>(s: LoaderState<H>, model: string): void {
  const run = s.rollouts.get(model);
  if (run === undefined) return;
  s.rollouts.delete(model);
  let ready = 0;
  for (const inc of s.replicas.of(model)) if (s.held.get(inc)?.phase === "ready" && s.core.stateOf(inc) === "ready") ready++;
  s.o.events.emit({ type: "rollout.finished", nodeId: "", model, address: "", incarnation: "", replaced: run.replaced, ready });
}

/** Whether the model's one held replica runs with older load settings than `spec`'s. */
function oneIsStale<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec): boolean {
  for (const inc of s.replicas.of(spec.id)) {
    const h = s.held.get(inc);
    if (h !== undefined && h.phase === "ready" && isStale(h, spec, s.o.agents)) return true;
  }
  return false;
}

/** The watchdog's per-model idle rules from the model table: the replica floor and the model's idle timeout. */
export function modelRules(models: ReadonlyMap<string, ModelSpec>): Map<string, ModelRule> {
  const rules = new Map<string, ModelRule>();
  for (const m of models.values()) {
    if (m.replicas.min > 0 || m.idleTimeoutMs !== undefined) rules.set(m.id, { minReplicas: m.replicas.min, idleTimeoutMs: m.idleTimeoutMs });
  }
  return rules;
}
