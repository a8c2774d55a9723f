import { isPlanted } from "@warden/common";
import type { OccupancyEntry, WatchdogCore, WatchdogService } from "@warden/watchdog";
import type { DrainMoves } from "./drain-node.js";
import type { FreedRetries } from "./freed-retries.js";
import type { GoneIncarnations } from "./gone-incarnations.js";
import type { HeldNodeIndex } from "./held-node-index.js";
import type { LeftoverTracker, Leftover } from "./leftover-tracker.js";
import type { LockTable } from "./lifecycle-lock.js";
import type { LoadCooldown } from "./load-cooldown.js";
import type { LoadJobs } from "./load-jobs.js";
import type { ReplicaCountCache } from "./replica-counts.js";
import type { ReplicaIndex } from "./replica-index.js";
import type { ReplicaRoutes } from "./replica-routes.js";
import type { ReplicaWork } from "./replica-work.js";
import type { ScaleOverride } from "./replica-settings.js";
import type { ScaleBreakers } from "./scale-breaker.js";
import type { LoaderOptions, StopTimings } from "./loader-options.js";
import type { HeldInstance } from "./loader-types.js";
import type { ModelSpec } from "./model-spec.js";
import type { BackendHandle } from "./ports.js";
import type { SettleWaiters } from "./settle-waiters.js";
import type { StopRpcs } from "./stop-rpcs.js";
import type { UnconfirmedReplicas } from "./unconfirmed-replicas.js";

/**
 * The loader's internal state, created and owned by the `Loader`, handed to
 * the modules that implement its rules (load path, stop sequence, routing,
 * unloading, adoption, exits). One owner: the held-instance table and the
 * model → incarnation index are mutated only by these modules, synchronously,
 * never across an await between a read and the write that depends on it.
 */
export interface LoaderState<H extends BackendHandle> {
  readonly o: LoaderOptions<H>;
  readonly core: WatchdogCore;
  readonly watchdog: WatchdogService;
  /** The local half of every instance, by incarnation. */
  readonly held: Map<string, HeldInstance<H>>;
  /** model → every incarnation held for it (its replicas), in step with `held`. */
  readonly replicas: ReplicaIndex;
  /** Each model's replica counts, kept until its records or held replicas change (replica-counts.ts). */
  readonly replicaCounts: ReplicaCountCache;
  /** Each model's replicas in routing order (a mirror of the watchdog's counts, checked on every pick). */
  readonly routes: ReplicaRoutes<H>;
  /** node → every incarnation held there, in step with `held` (a heartbeat's reconcile reads it). */
  readonly heldByNode: HeldNodeIndex<H>;
  /** model → an operator's ScaleModel override (replica-settings.ts). */
  readonly scaleOverrides: Map<string, ScaleOverride>;
  /** model → its rollout, while replicas run with older load settings (replica-tick.ts). */
  readonly rollouts: Map<string, RolloutRun>;
  /** Which models the replica reconciler looks at on its next pass (replica-work.ts). */
  readonly replicaWork: ReplicaWork;
  /** Nodes being drained and each model's queue of replica moves (drain-node.ts). */
  readonly drains: DrainMoves;
  /** False until the admission gate (the recovery window after a start or takeover) opens. */
  admissionOpen: boolean;
  /** model → the replica circuit breaker, when open (scale-breaker.ts). */
  readonly breakers: ScaleBreakers;
  /** model → the leader's load in progress (followers coalesce on it). */
  readonly loads: Map<string, Promise<HeldInstance<H>>>;
  /** model → the incarnation of its load in progress (minted before admission). */
  readonly loadIncarnations: Map<string, string>;
  /** incarnation → the controller that cancels its load (shutdown). */
  readonly loadControllers: Map<string, AbortController>;
  readonly locks: LockTable;
  readonly cooldown: LoadCooldown;
  /** model → its load job: waiting for a node, loading, or failed (load-jobs.ts). */
  readonly jobs: LoadJobs;
  readonly leftovers: LeftoverTracker;
  /** Instances known only from the journal, on nodes not heard from since start (journal-replicas.ts). */
  readonly unconfirmed: UnconfirmedReplicas;
  /** node → orphans reported by the reconciler: counted, never selectable. */
  readonly orphans: Map<string, readonly OccupancyEntry[]>;
  readonly settleWaiters: SettleWaiters;
  /** model → calls waiting in ensureLoaded (capped). */
  readonly waiting: Map<string, number>;
  /** incarnation → the stop deadline an explicit stop asked for, and who asked (stamped on eviction.started). */
  readonly stopOverrides: Map<string, { readonly stopTimeoutMs?: number; readonly actor?: string }>;
  readonly freedRetries: FreedRetries;
  /** StopBackend RPCs in flight: a second stop of the same incarnation joins the first. */
  readonly stopRpcs: StopRpcs;
  /** Incarnations whose current stop failed at the lifecycle lock or the busy wait. */
  readonly stopFailedAtLock: Set<string>;
  /** Replaced as a whole on config reload. */
  models: Map<string, ModelSpec>;
  /**
   * Incarnations confirmed gone (our stop confirmed, or the agent reported the
   * exit): a heartbeat built before and delivered after must not adopt or list
   * them again, and a call that failed because of that stop is not retried.
   */
  readonly gone: GoneIncarnations;
  readonly timings: StopTimings;
  readonly maxAttempts: number;
  readonly retryIntervalMs: number;
  /** How long a load that no node can take now, for a reason that ends by itself, waits at admission. */
  readonly loadWaitMs: number;
  readonly maxWaiting: number;
  closed: boolean;
}

/** A rollout in progress: the replica count it keeps ready, and the stale replicas it stopped so far. */
export interface RolloutRun {
  keep: number;
  replaced: number;
}

/** Adds the local half of an instance (a load's, or an adopted one) and indexes it as a replica of its model. */
export function holdInstance<H extends BackendHandle>(s: Pick<LoaderState<H>, "held" | "replicas" | "heldByNode">, h: HeldInstance<H>): void {
  s.held.set(h.incarnation, h);
  s.replicas.add(h.model, h.incarnation);
  s.heldByNode.add(h);
}

/** The one place a held instance's phase changes: its model's replica counts are recounted on their next read. */
export function setPhase<H extends BackendHandle>(s: Pick<LoaderState<H>, "replicas">, h: HeldInstance<H>, phase: HeldInstance<H>["phase"]): void {
  h.phase = phase;
  s.replicas.phaseChanged(h.model);
}

/** Removes the local half of an instance and closes its backend connection. */
export function dropHeld<H extends BackendHandle>(s: Pick<LoaderState<H>, "held" | "replicas" | "heldByNode">, incarnation: string): void {
  const h = s.held.get(incarnation);
  if (h === undefined) return;
  s.held.delete(incarnation);
  s.replicas.remove(h.model, incarnation);
  s.heldByNode.remove(h);
  h.backend?.close();
  h.backend = undefined;
}

export async function clearIntent<H extends BackendHandle>(s: Pick<LoaderState<H>, "o">, incarnation: string): Promise<void> {
  await s.o.journal.clearStopIntent(incarnation).catch((err: unknown) => {
    warn(s, "could not clear stop intent", { incarnation, err: String(err) });
  });
}

/**
 * Tells the watchdog what a node holds besides our instances: leftovers,
 * orphans and the journal's unconfirmed instances (their model's groups and
 * size as configured; an unconfigured model's: none, 0 bytes). Their groups
 * are the model's groups now, as for a held instance (groups apply live): a
 * leftover recorded while its model was out of the config, or before
 * UpdatePolicy changed its groups, still runs as that model and conflicts as
 * the config says today (seed 48116). An entry whose model is not configured
 * keeps the groups it was recorded with.
 */
export function pushOccupancy<H extends BackendHandle>(s: Pick<LoaderState<H>, "core" | "leftovers" | "orphans" | "unconfirmed" | "models">, nodeId: string): void {
  const entries = [...s.leftovers.occupancy(nodeId), ...(s.orphans.get(nodeId) ?? [])];
  // Planted bug "fixed-recovery-window": the journal's unconfirmed instances occupy nothing (the fixed window is the only guard).
  for (const u of isPlanted("fixed-recovery-window") ? [] : s.unconfirmed.onNode(nodeId)) {
    const spec = s.models.get(u.model);
    entries.push({ kind: "unconfirmed", key: u.incarnation, model: u.model, groups: spec?.groups ?? [], sizeBytes: spec?.sizeBytes ?? 0 });
  }
  s.core.setNodeOccupancy(nodeId, entries.map((e) => withLiveGroups(s.models, e)));
}

/** After the model table changed (reload, UpdatePolicy): every node with leftovers, orphans or unconfirmed instances again. */
export function pushAllOccupancy<H extends BackendHandle>(s: Pick<LoaderState<H>, "core" | "leftovers" | "orphans" | "unconfirmed" | "models">): void {
  for (const nodeId of new Set([...s.leftovers.nodes(), ...s.orphans.keys(), ...s.unconfirmed.nodes()])) pushOccupancy(s, nodeId);
}

function withLiveGroups(models: ReadonlyMap<string, ModelSpec>, e: OccupancyEntry): OccupancyEntry {
  const spec = e.model === undefined ? undefined : models.get(e.model);
  if (spec === undefined || sameGroups(spec.groups, e.groups)) return e;
  return { ...e, groups: spec.groups };
}

function sameGroups(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((g, i) => g === b[i]);
}

export function leftoverBase(l: Leftover): { nodeId: string; model: string; address: string; incarnation: string } {
  return { nodeId: l.nodeId, model: l.model, address: l.address, incarnation: l.incarnation };
}

export function warn<H extends BackendHandle>(s: Pick<LoaderState<H>, "o">, msg: string, meta: Record<string, unknown>): void {
  s.o.onWarning?.(msg, meta);
}
