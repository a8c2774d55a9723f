import type { Checker, CheckContext } from "./checker.js";

/** What the checker saw in the step where Warden moved a node to lost. */
interface LostDecision {
  readonly atMs: number;
  /** Since the node's last applied heartbeat; undefined when none was. */
  readonly sinceHeardMs: number | undefined;
  /** Since this generation's NodeTable marked the node unreachable (0 when it skipped the state). */
  readonly unreachableForMs: number;
  readonly silent: number;
  readonly counted: number;
}

/**
 * Invariant 11: a node is declared lost by timeout only after it really was
 * silent (no heartbeat reached the coordinator) for grace + lost-after, after
 * lost-after spent unreachable (a coordinator waking from a stall has seen
 * nothing for that long), and never while most nodes are unreachable (the
 * full-disruption rule).
 *
 * Judged in the step where the NodeTable made the decision, not when its
 * nodeLost event is delivered: the event goes through the journal first, and
 * an event-loop stall can hold it while the heartbeats of the stall's end are
 * applied (the decision saw the world before them).
 */
export function nodeHealthChecker(): Checker {
  const lastHeard = new Map<string, number>();
  const seenState = new WeakMap<object, string>();
  const unreachableAt = new WeakMap<object, number>();
  const decisions = new Map<string, LostDecision[]>();
  /** Per coordinator generation: the nodes whose heartbeat it applied (vouched for, as it counts them). */
  const heardBy = new WeakMap<object, Set<string>>();
  let generation: object | undefined;
  const judge = (ctx: CheckContext, nodeId: string, unreachableSinceMs: number | undefined): LostDecision => {
    const w = ctx.world;
    const now = w.clock.now();
    const heard = lastHeard.get(nodeId);
    // The nodes the full-disruption rule counts (DESIGN: embedded and already lost ones do not,
    // nor — since the security work — a registration nobody vouches for: no credential, and no
    // heartbeat applied by this coordinator yet, so junk registrations cannot freeze node-loss
    // handling), plus the one just declared. Vouching is the checker's own record, not Warden's
    // flag: seed 250 was Warden forgetting it on a re-registration. The one just declared is
    // excused only from the lost filter (this very decision made it lost), not from vouching:
    // an unvouched node is out of the count even when it is the one declared (seed 3193).
    const vouched = ctx.coord === undefined ? undefined : heardBy.get(ctx.coord);
    const nodes = (ctx.coord?.nodes.list() ?? []).filter((n) => !n.embedded && vouched?.has(n.nodeId) === true && (n.state !== "lost" || n.nodeId === nodeId));
    const silent = nodes.filter((n) => now - (lastHeard.get(n.nodeId) ?? 0) > w.opts.nodeGraceMs + 1_000).length;
    return { atMs: now, sinceHeardMs: heard === undefined ? undefined : now - heard, unreachableForMs: now - (unreachableSinceMs ?? now), silent, counted: nodes.length };
  };
  return {
    name: "node-health",
    afterHeartbeat(ctx, hb, _sentAtMs, applied) {
      if (!applied) return;
      lastHeard.set(hb.nodeId, ctx.world.clock.now());
      if (ctx.coord === undefined) return;
      const heard = heardBy.get(ctx.coord) ?? new Set<string>();
      heard.add(hb.nodeId);
      heardBy.set(ctx.coord, heard);
    },
    afterStep(ctx) {
      const c = ctx.coord;
      if (c === undefined) return;
      if (c !== generation) {
        // A new generation delivered its recovered events in the step that started it: the old
        // one's decisions still queued had their events die with it.
        generation = c;
        decisions.clear();
      }
      for (const n of c.nodes.list()) {
        const was = seenState.get(n);
        if (was === n.state) continue;
        seenState.set(n, n.state);
        // A new record is a registration that reached the coordinator: the node was heard then.
        if (was === undefined && n.state === "ready") lastHeard.set(n.nodeId, ctx.world.clock.now());
        if (n.state === "unreachable") unreachableAt.set(n, ctx.world.clock.now());
        if (n.state !== "lost" || n.embedded) continue;
        const q = decisions.get(n.nodeId) ?? [];
        q.push(judge(ctx, n.nodeId, was === "unreachable" ? unreachableAt.get(n) : undefined));
        decisions.set(n.nodeId, q);
      }
    },
    onEvent(ctx, e) {
      const w = ctx.world;
      if (e.payload.case === "unreachabilityPaused" && e.payload.value.paused) w.coverage.hit("unreachability.paused");
      if (e.payload.case === "nodeUnreachable") w.coverage.hit("node.unreachable");
      if (e.payload.case !== "nodeLost") return;
      w.coverage.hit("node.lost");
      w.truth.declaredLost.add(e.nodeId);
      // Decisions and their events are in the same order per node.
      const d = decisions.get(e.nodeId)?.shift();
      const rec = ctx.coord?.nodes.get(e.nodeId);
      // Delivered in the step of its decision (before afterStep): judged here, not queued again.
      const was = rec === undefined ? undefined : seenState.get(rec);
      if (d === undefined && rec !== undefined) seenState.set(rec, rec.state);
      if (e.payload.value.byOperator) return;
      if (ctx.coord === undefined) return;
      // No decision seen (the event was published in this very step, before afterStep): judge now.
      const at = d ?? judge(ctx, e.nodeId, rec !== undefined && was === "unreachable" ? unreachableAt.get(rec) : undefined);
      if (at.unreachableForMs < w.opts.nodeLostAfterMs) ctx.report("11 disconnected nodes", `${e.nodeId} declared lost ${String(at.unreachableForMs)}ms after Warden marked it unreachable (lost-after ${String(w.opts.nodeLostAfterMs)})`);
      if (at.sinceHeardMs !== undefined && at.sinceHeardMs < w.opts.nodeGraceMs + w.opts.nodeLostAfterMs) ctx.report("11 disconnected nodes", `${e.nodeId} declared lost ${String(at.sinceHeardMs)}ms after its last heartbeat`);
      if (at.silent >= 3 && at.silent >= 0.55 * at.counted + 1) ctx.report("11 disconnected nodes", `${e.nodeId} declared lost while ${String(at.silent)} of ${String(at.counted)} nodes are silent`);
    },
  };
}
