import type { SimCoordinator } from "../coordinator/sim-coordinator.js";
import type { CheckContext } from "./checker.js";

/**
 * Checker `unchanged heartbeat` (the differential mode, SimOptions.unchangedHeartbeats): a heartbeat
 * that would skip its inventory reconcile (an empty delta on a settled node,
 * `@warden/cluster` unchanged-heartbeat.ts) runs the full reconcile instead,
 * and what that reconcile owns — the stored inventory, missing counts, fences,
 * the instances and leftovers the loader holds on the node, its orphans and
 * loads starting elsewhere — must come out as it went in: what the skip
 * leaves. (The journal's unconfirmed instances and open intents are settled
 * on both paths alike, so they are not compared.) Called before the
 * reconcile; the returned function after it.
 */
export function unchangedChecker(ctx: CheckContext, coord: SimCoordinator, nodeId: string): () => void {
  const before = snapshot(ctx, coord, nodeId);
  return () => {
    const after = snapshot(ctx, coord, nodeId);
    if (after !== before) ctx.report("unchanged heartbeat", `${nodeId}: the full reconcile of a heartbeat the skip would take changed ${before} into ${after}`);
  };
}

function snapshot(ctx: CheckContext, coord: SimCoordinator, nodeId: string): string {
  const n = coord.nodes.get(nodeId);
  const loader = coord.loader;
  const occupancy = loader.core.occupancy(nodeId);
  return JSON.stringify({
    inventory: n?.inventory?.map((e) => `${e.incarnation}:${String(e.state)}`),
    missing: [...(n?.missing ?? [])],
    fences: [...(n?.fences ?? [])].map(([inc, at]) => `${inc}@${at.toString()}`),
    held: loader.heldOn(nodeId).map((h) => `${h.incarnation}:${h.phase}`),
    leftovers: loader.leftoversOn(nodeId).map((l) => l.incarnation),
    orphans: occupancy.orphans,
    startingHere: ctx.world.opts.models.flatMap((m) => [...loader.startingElsewhere(m.id)].filter((at) => at === nodeId).map(() => m.id)),
  });
}
