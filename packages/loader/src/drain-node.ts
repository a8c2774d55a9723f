import { decideDrainStep, type DrainStepView } from "./drain-plan.js";
import { warn, type LoaderState } from "./loader-state.js";
import type { ModelSpec } from "./model-spec.js";
import type { BackendHandle } from "./ports.js";
import { chooseReplica } from "./replica-routing.js";
import { startReplicaLoad } from "./replica-loads.js";

export interface DrainOptions {
  /** Skip the busy wait and `Free()` of every stop. */
  readonly force: boolean;
  /** Asked before every step: false once the node was undrained, and the drain leaves what is still there. */
  readonly stillDraining?: () => boolean;
}

/**
 * Which nodes are being drained and each model's queue of replica moves,
 * owned by the Loader. The queue makes a model's moves one at a time, across
 * every drain: each move reads the model's counts and stops (or starts) in
 * one turn, so two drains never both count the other's replica.
 */
export class DrainMoves {
  private readonly nodes = new Map<string, number>();
  private readonly tails = new Map<string, Promise<void>>();

  /** `onSettled(model)`: the model's last queued move ended (the replica reconciler looks at it again). */
  constructor(private readonly onSettled: (model: string) => void = () => {}) {}

  /** A move of `model` is queued or running (a lowered max waits for it: the move runs one more for a while). */
  moving(model: string): boolean {
    return this.tails.has(model);
  }

  isDraining(nodeId: string): boolean {
    return this.nodes.has(nodeId);
  }

  enter(nodeId: string): void {
    this.nodes.set(nodeId, (this.nodes.get(nodeId) ?? 0) + 1);
  }

  leave(nodeId: string): void {
    const n = (this.nodes.get(nodeId) ?? 1) - 1;
    if (n <= 0) this.nodes.delete(nodeId);
    else this.nodes.set(nodeId, n);
  }

  /** Runs `move` after every move of `model` queued before it. */
  serial(model: string, move: () => Promise<void>): Promise<void> {
    const run = (this.tails.get(model) ?? Promise.resolve()).then(move);
    const tail = run.catch(() => undefined);
    this.tails.set(model, tail);
    void tail.then(() => {
      if (this.tails.get(model) !== tail) return;
      this.tails.delete(model);
      this.onSettled(model);
    });
    return run;
  }
}

/**
 * Drains a node (DrainNode): every instance on it is stopped with
 * reason `drain` through the normal stop sequence, except that a ready
 * replica of a model with `min` > 0 is first moved — a replacement is
 * started elsewhere by normal placement and admission, and the drained one
 * is stopped only once that is ready (drain-plan.ts decides). Where no room
 * exists the replica is stopped as before, and the drain says so in the log.
 * Resolves once every stop has settled.
 */
export async function drainNode<H extends BackendHandle>(s: LoaderState<H>, moves: DrainMoves, nodeId: string, o: DrainOptions): Promise<void> {
  moves.enter(nodeId);
  try {
    const work: Promise<void>[] = [];
    // A drain is an operator's rare act: one pass over the records is fine here.
    for (const v of s.core.instances()) {
      if (v.nodeId !== nodeId) continue;
      const spec = s.models.get(v.model);
      if (spec !== undefined && spec.replicas.min > 0 && v.state === "ready" && v.pendingEviction === undefined) {
        work.push(moves.serial(v.model, () => moveReplica(s, moves, v.model, v.incarnation, o)));
      } else {
        work.push(stopDrained(s, v.incarnation, o));
      }
    }
    // Every move and stop catches its own failure; allSettled keeps one surprise from hiding the rest.
    await Promise.allSettled(work);
  } finally {
    moves.leave(nodeId);
  }
}

/** One replica off the draining node: asks drain-plan again after every wait and replacement. */
async function moveReplica<H extends BackendHandle>(s: LoaderState<H>, moves: DrainMoves, model: string, incarnation: string, o: DrainOptions): Promise<void> {
  let attempts = 0;
  let deferrals = 0;
  for (;;) {
    if (s.closed || o.stillDraining?.() === false) return;
    const spec = s.models.get(model);
    const v = s.core.instance(incarnation);
    if (v === undefined) return;
    // Unconfigured meanwhile, or already being stopped (joined), or not ready any more: no floor to keep.
    if (spec === undefined || v.state !== "ready" || v.pendingEviction !== undefined) return stopDrained(s, incarnation, o);
    const step = decideDrainStep(drainView(s, moves, spec, incarnation, attempts, deferrals));
    switch (step.t) {
      case "stop":
        if (step.why === "no-room") {
          warn(s, "drain: no room for a replacement replica; stopping the drained one (the model is below min until room exists)", { model, nodeId: v.nodeId, incarnation, min: spec.replicas.min, why: step.detail });
        }
        return stopDrained(s, incarnation, o);
      case "wait":
        await s.loads.get(model)?.catch(() => undefined);
        break;
      case "replace": {
        // Counted at the start, the replica being moved included: one more than that and no further.
        const outcome = await startReplicaLoad(s, spec, "drain", chooseReplica(s, model).live + 1);
        if (outcome === "failed") attempts++;
        if (outcome === "deferred") {
          // A node that joined a moment ago has not reported its inventory: ask again after the retry interval.
          deferrals++;
          await s.o.sleep(s.retryIntervalMs).catch(() => undefined);
        }
        break;
      }
    }
  }
}

function drainView<H extends BackendHandle>(s: LoaderState<H>, moves: DrainMoves, spec: ModelSpec, incarnation: string, attempts: number, deferrals: number): DrainStepView {
  let readyOthers = 0;
  let countedElsewhere = 0;
  for (const inc of s.replicas.of(spec.id)) {
    const h = s.held.get(inc);
    if (h === undefined) continue;
    if (!moves.isDraining(h.nodeId)) countedElsewhere++;
    const v = s.core.instance(inc);
    if (inc !== incarnation && v !== undefined && v.state === "ready" && v.pendingEviction === undefined && h.phase === "ready") readyOthers++;
  }
  const nowMs = s.o.clock.now();
  const loadInFlight = s.loads.has(spec.id);
  // Placement is asked only when a replacement could start.
  const choice = loadInFlight || readyOthers >= spec.replicas.min ? undefined : s.o.placement.choose(spec);
  return {
    min: spec.replicas.min,
    max: spec.replicas.max,
    readyOthers,
    countedElsewhere,
    loadInFlight,
    breakerAllows: s.breakers.allows(spec.id, nowMs),
    noRoom: choice !== undefined && choice.nodeId === undefined ? choice.reason : undefined,
    attempts,
    deferrals,
    maxDeferrals: s.maxAttempts,
  };
}

/** The normal stop sequence, reason `drain` (a pending stop is joined). */
async function stopDrained<H extends BackendHandle>(s: LoaderState<H>, incarnation: string, o: DrainOptions): Promise<void> {
  try {
    await s.watchdog.stop(incarnation, { reason: "drain", force: o.force });
  } catch (err) {
    warn(s, "drain stop failed", { incarnation, err: String(err) });
  }
}
