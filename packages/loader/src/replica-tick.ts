import type { ModelRule } from "@warden/watchdog";
import { warn, type LoaderState } from "./loader-state.js";
import type { ModelSpec } from "./model-spec.js";
import type { BackendHandle } from "./ports.js";
import { decideReplicas, type ReplicaView } from "./replica-reconciler.js";
import { startReplicaLoad } from "./replica-loads.js";
import { chooseReplica } from "./replica-routing.js";
import { stopInstance } from "./unload.js";

/**
 * One reconciler pass over every model that has replica work (runs on the
 * loader's tick, after the watchdog's): restores `min`, scales idle replicas
 * down (reason `scale-down`, through the normal stop sequence, announced by
 * `replica.scaled-down` first). A model with min 0 and at most one replica
 * costs one lookup. Never awaits a stop or a load.
 */
export function reconcileReplicas<H extends BackendHandle>(s: LoaderState<H>): void {
  if (s.closed) return;
  for (const spec of s.models.values()) {
    if (spec.replicas.min === 0 && s.replicas.count(spec.id) <= 1) continue;
    const d = decideReplicas(viewOf(s, spec));
    if (d.t === "load") {
      void startReplicaLoad(s, spec, "min");
    } else if (d.t === "scale-down") {
      const h = s.held.get(d.incarnation);
      if (h === undefined) continue;
      const live = chooseReplica(s, spec.id).live;
      s.o.events.emit({ type: "replica.scaled-down", nodeId: h.nodeId, model: spec.id, address: h.address ?? "", incarnation: h.incarnation, replicas: live - 1 });
      void stopInstance(s, d.incarnation, { force: false, reason: "scale-down" }).catch((err: unknown) => {
        warn(s, "scale-down stop failed", { model: spec.id, incarnation: d.incarnation, err: String(err) });
      });
    }
  }
}

function viewOf<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec): ReplicaView {
  const nowMs = s.o.clock.now();
  const idle: { incarnation: string; idleSinceMs: number }[] = [];
  let ready = 0;
  for (const inc of s.replicas.of(spec.id)) {
    const h = s.held.get(inc);
    const v = s.core.instance(inc);
    if (h === undefined || v === undefined || v.pendingEviction !== undefined || v.state !== "ready" || h.phase !== "ready") continue;
    ready++;
    if (v.inFlight === 0) idle.push({ incarnation: inc, idleSinceMs: v.idleSinceMs ?? v.stateSinceMs });
  }
  const c = chooseReplica(s, spec.id);
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
  };
}

/** The watchdog's per-model idle rules from the model table: the replica floor and the model's idle timeout. */
export function modelRules(models: ReadonlyMap<string, ModelSpec>): Map<string, ModelRule> {
  const rules = new Map<string, ModelRule>();
  for (const m of models.values()) {
    if (m.replicas.min > 0 || m.idleTimeoutMs !== undefined) rules.set(m.id, { minReplicas: m.replicas.min, idleTimeoutMs: m.idleTimeoutMs });
  }
  return rules;
}
