import { isStale } from "@warden/loader";
import type { CheckContext, Checker } from "./checker.js";

/**
 * Held replicas of `model` counted as the reconciler does: not pending eviction, not freed (`live`), and of those the ready ones.
 * `offDraining` leaves out replicas on draining nodes: a drain moves a replica by starting its replacement first, so while it
 * moves the model runs one more than max; the replicas off draining nodes never exceed it (README "Replicas", Drain).
 */
function replicaCounts(ctx: CheckContext, model: string, except?: string, offDraining = false): { held: number; live: number; ready: number } {
  const c = ctx.coord;
  if (c === undefined) return { held: 0, live: 0, ready: 0 };
  let held = 0;
  let live = 0;
  let ready = 0;
  for (const h of c.loader.heldInstances()) {
    if (h.model !== model || h.incarnation === except) continue;
    if (offDraining && c.nodes.get(h.nodeId)?.draining === true) continue;
    held++;
    const v = c.loader.core.instance(h.incarnation);
    if (v === undefined || v.pendingEviction !== undefined || v.state === "freed") continue;
    live++;
    if (v.state === "ready" && h.phase === "ready") ready++;
  }
  return { held, live, ready };
}

/**
 * Whether a replica of `model` other than `except` still runs with older load settings than the config's: a rollout
 * runs one replacement beside those (README "Replicas", Rollout), so the model may hold one more than max meanwhile.
 */
function rolling(ctx: CheckContext, model: string, except: string): boolean {
  const c = ctx.coord;
  const spec = c?.loader.modelSpec(model);
  if (c === undefined || spec === undefined) return false;
  return c.loader.heldInstances().some((h) => h.model === model && h.incarnation !== except && isStale(h, spec));
}

function describeHeld(ctx: CheckContext, model: string, except: string): string {
  const c = ctx.coord;
  if (c === undefined) return "";
  return c.loader
    .heldInstances()
    .filter((h) => h.model === model && h.incarnation !== except)
    .map((h) => `${h.incarnation} on ${h.nodeId} ${h.phase}/${c.loader.core.stateOf(h.incarnation) ?? "unregistered"}`)
    .join(", ");
}

/**
 * The replica invariants, against the ground truth and the loader:
 * - routing (3, 6): a call never goes to a leftover, to a replica being
 *   stopped (freed), nor to one on an unreachable node while a ready replica
 *   of the model is on a reachable one (route-pending and routing cover
 *   pending eviction and a StopBackend in flight);
 * - count: a start never takes the model's replicas not being stopped past
 *   `max`, and a scale-up never its held ones (those being stopped count: a
 *   failed stop may register one again), replicas on draining nodes aside
 *   (a drain's move runs the replacement beside them), and one above max while a
 *   rollout replaces replicas with older load settings; the idle
 *   watchdog and a scale-down never take it below `min` (scale-down never
 *   below max(min, 1)) — LRU, group, memory, busy, admin stops, crashes and
 *   node loss may, and the reconciler restores `min` by quiescence unless
 *   its breaker is open (no room) or a load is in flight;
 * - placement: a start never puts a replica where `spread: node` or the
 *   node's `maxReplicasPerModel` forbids, counting the model's live
 *   processes Warden accounts there (held or leftover); an operator's
 *   LoadModel naming the node is exempt;
 * - the central rule per instance (1): a failed stop of one replica leaves
 *   every other replica of the model that still runs accounted.
 * Counts the replica "sometimes" branches for coverage.
 */
export function replicaChecker(): Checker {
  /** Replicas of a model whose stop just failed, to check after the settle's step: incarnation → the others then held. */
  const afterFailedStop = new Map<string, readonly string[]>();
  return {
    name: "replica",
    onLease(ctx, lease) {
      const c = ctx.coord;
      if (c === undefined) return;
      const spec = c.loader.modelSpec(lease.model);
      if (c.loader.leftoverList().some((l) => l.incarnation === lease.incarnation)) ctx.report("3 routability", `call routed to ${lease.incarnation} (${lease.model} on ${lease.nodeId}), a leftover`);
      else if (c.loader.core.instance(lease.incarnation)?.state === "freed") ctx.report("6 no dropped new requests", `call routed to ${lease.incarnation} (${lease.model} on ${lease.nodeId}), being stopped (freed)`);
      // An instance serving through its agent's outage (its probe answers) is routed as any ready replica (outage-route-checker).
      else if (spec !== undefined && c.nodes.get(lease.nodeId)?.state !== "ready" && c.outage?.probes.routable(lease.incarnation) !== true) {
        const other = c.loader.heldInstances().find((h) => h.model === lease.model && h.incarnation !== lease.incarnation && h.phase === "ready" && c.nodes.get(h.nodeId)?.state === "ready" && c.loader.core.stateOf(h.incarnation) === "ready");
        if (other !== undefined) ctx.report("3 routability", `call routed to ${lease.incarnation} on unreachable ${lease.nodeId} while replica ${other.incarnation} on ${other.nodeId} was ready`);
      }
    },
    onStartSent(ctx, nodeId, model, incarnation) {
      const c = ctx.coord;
      if (c === undefined || c.loader.heldInstance(incarnation) === undefined) return;
      const spec = c.loader.modelSpec(model);
      if (spec === undefined) return;
      // Any start: replicas not being stopped, this one included. (An on-demand load that began before
      // its model's last replica was detached for a stop goes on; that one settles stopped or as a leftover.)
      const n = replicaCounts(ctx, model, undefined, true);
      if (n.live > spec.replicas.max + (rolling(ctx, model, incarnation) ? 1 : 0)) ctx.report("replicas: max", `start of ${model} ${incarnation} on ${nodeId} makes ${String(n.live)} live replicas (max ${String(spec.replicas.max)}): ${describeHeld(ctx, model, incarnation)}`);
      if (ctx.world.truth.explicitLoads.has(`${model} ${nodeId}`)) return;
      const leftovers = new Set(c.loader.leftoverList().map((l) => l.incarnation));
      let here = 0;
      const seen: string[] = [];
      for (const p of ctx.world.truth.live()) {
        if (p.nodeId !== nodeId || p.model !== model || p.incarnation === incarnation) continue;
        const how = leftovers.has(p.incarnation) ? "leftover" : (c.loader.core.stateOf(p.incarnation) ?? (c.loader.heldInstance(p.incarnation) === undefined ? undefined : `held ${c.loader.heldInstance(p.incarnation)?.phase ?? ""}`));
        if (how === undefined) continue;
        here++;
        seen.push(`${p.incarnation} ${how}`);
      }
      const perNode = c.nodes.limitsOf(nodeId).maxReplicasPerModel ?? 1;
      if (here + 1 > perNode) ctx.report("replicas: placement", `start of ${model} ${incarnation} on ${nodeId} with ${String(here)} accounted replicas there (maxReplicasPerModel ${String(perNode)}): ${seen.join(", ")}`);
      else if (spec.spread === "node" && here > 0) ctx.report("replicas: placement", `start of ${model} ${incarnation} on ${nodeId} beside ${String(here)} accounted replica(s) (spread: node): ${seen.join(", ")}`);
    },
    onLoaderEvent(ctx, e) {
      const c = ctx.coord;
      if (c === undefined) return;
      const cov = ctx.world.coverage;
      switch (e.type) {
        case "replica.scaled-up": {
          cov.hit(`replica.scaled-up.${e.cause}`);
          // A replica load counts the replicas being stopped too (a failed stop may register one again).
          const spec = c.loader.modelSpec(e.model);
          const n = replicaCounts(ctx, e.model, undefined, true);
          const bound = spec === undefined ? 0 : spec.replicas.max + (e.cause === "rollout" && rolling(ctx, e.model, e.incarnation) ? 1 : 0);
          if (spec !== undefined && n.held > bound) ctx.report("replicas: max", `${e.cause} scale-up of ${e.model} to ${e.nodeId} makes ${String(n.held)} held replicas (max ${String(spec.replicas.max)}): ${describeHeld(ctx, e.model, e.incarnation)}`);
          return;
        }
        case "replica.scaled-down":
          cov.hit("replica.scaled-down");
          if (e.cause === "max") cov.hit("replica.scaled-down.max");
          return;
        case "replica.scale-blocked":
          cov.hit("replica.scale-blocked");
          return;
        case "eviction.started": {
          const spec = c.loader.modelSpec(e.model);
          if (spec === undefined || e.incarnation.startsWith("pid:")) return;
          const others = replicaCounts(ctx, e.model, e.incarnation);
          if (e.reason === "idle" && others.ready < spec.replicas.min) ctx.report("replicas: min", `idle eviction of ${e.model} ${e.incarnation} leaves ${String(others.ready)} ready replicas (min ${String(spec.replicas.min)})`);
          if ((e.reason === "scale-down" || e.reason === "rollout") && others.ready < Math.max(1, spec.replicas.min)) ctx.report("replicas: min", `${e.reason} of ${e.model} ${e.incarnation} leaves ${String(others.ready)} ready replicas (min ${String(spec.replicas.min)}): ${describeHeld(ctx, e.model, e.incarnation)}`);
          return;
        }
        case "eviction.failed": {
          if (e.incarnation.startsWith("pid:")) return;
          const others = c.loader.heldInstances().filter((h) => h.model === e.model && h.incarnation !== e.incarnation).map((h) => h.incarnation);
          if (others.length === 0) return;
          cov.hit("replica.stop-failed");
          afterFailedStop.set(e.incarnation, others);
          return;
        }
        default:
          return;
      }
    },
    afterStep(ctx) {
      const c = ctx.coord;
      if (c === undefined || afterFailedStop.size === 0) return;
      const w = ctx.world;
      for (const [failed, others] of afterFailedStop) {
        for (const inc of others) {
          const p = w.truth.byIncarnation.get(inc);
          if (p === undefined || p.phase === "dead" || w.truth.forgotten.has(inc) || c.nodes.get(p.nodeId)?.state === "lost") continue;
          if (!c.loader.knows(inc) || c.loader.isGone(inc)) ctx.report("1 no amnesia", `the failed stop of ${failed} left replica ${inc} (${p.model} on ${p.nodeId}, still running) unaccounted`);
        }
      }
      afterFailedStop.clear();
    },
    atQuiescence(ctx) {
      const c = ctx.coord;
      if (c === undefined) return;
      for (const s of c.loader.replicaStatuses()) {
        const min = s.settings.min;
        // The floor is restored one load at a time: a load in flight is progress (seeds 114, 230, 602).
        if (min === 0 || s.ready + s.loading >= min || s.loading > 0 || s.blocked !== undefined) continue;
        ctx.report("replicas: min", `${s.model} has ${String(s.ready)} ready replicas at quiescence (min ${String(min)}), none loading and no open breaker`);
      }
    },
  };
}
