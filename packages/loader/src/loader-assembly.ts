import { leftoverBackoff } from "@warden/common";
import type { PolicyPatch, WatchdogCore, WatchdogService } from "@warden/watchdog";
import { rememberGone } from "./adoption.js";
import { DrainMoves } from "./drain-node.js";
import { FreedRetries } from "./freed-retries.js";
import type { GoneIncarnations } from "./gone-incarnations.js";
import { HeldNodeIndex } from "./held-node-index.js";
import { LeftoverTracker } from "./leftover-tracker.js";
import { LockTable } from "./lifecycle-lock.js";
import type { LoadCooldown } from "./load-cooldown.js";
import { LoadJobs } from "./load-jobs.js";
import { defaultStopTimings, type LoaderOptions } from "./loader-options.js";
import { leftoverBase, pushOccupancy, type LoaderState } from "./loader-state.js";
import type { HeldInstance } from "./loader-types.js";
import type { ModelSpec } from "./model-spec.js";
import type { BackendHandle } from "./ports.js";
import { ReplicaCountCache } from "./replica-counts.js";
import { ReplicaIndex } from "./replica-index.js";
import { ReplicaRoutes } from "./replica-routes.js";
import { ScaleBreakers } from "./scale-breaker.js";
import { ReplicaWork } from "./replica-work.js";
import { SettleWaiters } from "./settle-waiters.js";
import { StopRpcs } from "./stop-rpcs.js";
import { retryLeftover } from "./stop-sequence.js";
import { UnconfirmedReplicas } from "./unconfirmed-replicas.js";

/**
 * The Loader's state, assembled once by its constructor: every table empty,
 * the leftover and freed-Free retry timers wired to the rules that act on
 * them. Split from loader.ts so the class keeps to its surface; the callbacks
 * close over the state they are part of and run only after it exists.
 */
export function assembleLoaderState<H extends BackendHandle>(
  o: LoaderOptions<H>,
  core: WatchdogCore,
  watchdog: WatchdogService,
  held: Map<string, HeldInstance<H>>,
  models: Map<string, ModelSpec>,
  cooldown: LoadCooldown,
  gone: GoneIncarnations,
): LoaderState<H> {
  const leftovers = new LeftoverTracker({
    clock: o.clock,
    rng: o.rng,
    ...(o.leftoverBackoff === undefined ? {} : { backoff: o.leftoverBackoff }),
    ...(o.stuckAfterMs === undefined ? {} : { stuckAfterMs: o.stuckAfterMs }),
    retry: (l) => retryLeftover(s, l),
    ...(o.mayAct === undefined ? {} : { mayAct: o.mayAct }),
    onNodeChanged: (nodeId) => {
      pushOccupancy(s, nodeId);
    },
    onRetried: (l) => {
      o.events.emit({ type: "eviction.retried", ...leftoverBase(l), attempt: l.attempts, error: l.lastError });
    },
    onStuck: (l) => {
      o.events.emit({ type: "leftover.stuck", ...leftoverBase(l), attempts: l.attempts, sinceWallMs: l.sinceWallMs, lastError: l.lastError });
    },
    onReaped: (l) => {
      rememberGone(s, l.incarnation, l.nodeId);
      o.events.emit({ type: "leftover.reaped", ...leftoverBase(l), attempts: l.attempts });
    },
  });
  const freedRetries = new FreedRetries({
    clock: o.clock,
    rng: o.rng,
    backoff: o.leftoverBackoff ?? leftoverBackoff,
    retry: (incarnation) => {
      if (s.closed) return;
      if (o.mayAct?.() === false) {
        freedRetries.schedule(incarnation);
        return;
      }
      void watchdog.stop(incarnation, { reason: "retry", force: true });
    },
  });
  const replicas = new ReplicaIndex();
  const replicaWork = new ReplicaWork();
  const s: LoaderState<H> = {
    o,
    core,
    watchdog,
    held,
    replicas,
    replicaCounts: new ReplicaCountCache(),
    routes: new ReplicaRoutes({ held, replicas, core }),
    heldByNode: new HeldNodeIndex(),
    scaleOverrides: new Map(),
    breakers: new ScaleBreakers(),
    replicaWork,
    drains: new DrainMoves((model) => {
      replicaWork.mark(model);
    }),
    admissionOpen: o.admissionGate === undefined,
    rollouts: new Map(),
    loads: new Map(),
    loadIncarnations: new Map(),
    loadControllers: new Map(),
    locks: new LockTable(),
    cooldown,
    jobs: new LoadJobs(o.loadJobs),
    leftovers,
    unconfirmed: new UnconfirmedReplicas(),
    orphans: new Map(),
    settleWaiters: new SettleWaiters(),
    waiting: new Map(),
    stopOverrides: new Map(),
    freedRetries,
    stopFailedAtLock: new Set(),
    stopRpcs: new StopRpcs(),
    models,
    gone,
    timings: { ...defaultStopTimings, ...o.stop },
    maxAttempts: o.enforcement?.maxAttempts ?? 30,
    retryIntervalMs: o.enforcement?.intervalMs ?? 1_000,
    loadWaitMs: o.loadWaitMs ?? 30_000,
    maxWaiting: o.maxWaitingPerModel ?? 512,
    closed: false,
  };
  return s;
}

/** The watchdog's view of the model table: groups and pins. */
export function modelPolicy(models: ReadonlyMap<string, ModelSpec>): PolicyPatch {
  const groups: Record<string, readonly string[]> = {};
  const pinned: string[] = [];
  for (const m of models.values()) {
    if (m.groups.length > 0) groups[m.id] = m.groups;
    if (m.pinned) pinned.push(m.id);
  }
  return { modelGroups: groups, pinnedModels: pinned };
}
