import type { EvictionReason } from "@warden/watchdog";
import type { LoadJobPhase } from "./load-jobs.js";

interface Base {
  readonly nodeId: string;
  readonly model: string;
  readonly address: string;
  readonly incarnation: string;
  /** Who asked for this (an operator's principal, as the coordinator names it); absent for the loader's own decisions. */
  readonly actor?: string;
}

/**
 * What the loader reports as it commits decisions. The coordinator turns these
 * into the DESIGN §4 audit events (log, WatchEvents, outbox). Emitted where the
 * decision is committed, never where it is considered.
 */
export type LoaderEvent =
  | (Base & { readonly type: "eviction.started"; readonly reason: EvictionReason; readonly trigger: string; readonly wasBusy: boolean; readonly force: boolean; readonly openRequestIds: readonly string[] })
  | (Base & { readonly type: "eviction.stopped"; readonly reason: EvictionReason; readonly alreadyGone: boolean; /** From selection (StopCommand.atMs) to the confirmed stop. */ readonly stopDurationMs: number })
  | (Base & {
      readonly type: "eviction.failed";
      readonly reason: EvictionReason;
      readonly error: string;
      readonly outcome: "registered-again" | "leftover";
      readonly openRequestIds: readonly string[];
      readonly terminalReason: string;
    })
  | (Base & { readonly type: "eviction.retried"; readonly attempt: number; readonly error: string })
  | (Base & { readonly type: "leftover.stuck"; readonly attempts: number; readonly sinceWallMs: number; readonly lastError: string })
  | (Base & { readonly type: "leftover.reaped"; readonly attempts: number })
  | (Base & { readonly type: "backend.loaded"; readonly loadDurationMs: number })
  /** `outcomeUnknown`: the start was sent and no Spawned came; it counts on its node until an inventory settles it (unknown-outcome-start.ts). */
  | (Base & { readonly type: "backend.load-failed"; readonly code: string; readonly message: string; readonly exitCode: number | undefined; readonly lastStderrLine: string; readonly outcomeUnknown: boolean })
  | (Base & { readonly type: "backend.exited"; readonly exitCode: number | undefined; readonly signal: string; readonly intentional: boolean; readonly lastStderrLine: string })
  | (Base & { readonly type: "policy.limit-exceeded"; readonly limit: number; readonly occupied: number; readonly pinned: number })
  | (Base & { readonly type: "instance.forgotten"; readonly operator: string; readonly note: string })
  | (Base & { readonly type: "instance.adopted"; readonly asLeftover: boolean; readonly foundBy: AdoptionSource })
  // Replicas. scaled-up: a replica load was started (incarnation reserved, node chosen;
  // cause "drain": the replacement of a replica on a draining node; cause "rollout": the replacement
  // of a replica started with older load settings, whose stop follows with reason "rollout");
  // scaled-down: a replica above min was stopped for idleness (cause "idle") or above a lowered max
  // (cause "max"); its eviction events follow, reason "scale-down"; scale-blocked: a scale-up or the min floor cannot fit — nodeId/address/incarnation "".
  | (Base & { readonly type: "replica.scaled-up"; readonly cause: "min" | "in-flight" | "drain" | "rollout"; readonly replicas: number })
  | (Base & { readonly type: "replica.scaled-down"; readonly replicas: number; readonly cause: "idle" | "max" })
  | (Base & { readonly type: "replica.scale-blocked"; readonly error: string; readonly failures: number; readonly retryAfterMs: number })
  // A rollout began (replicas run older load settings than the config's) or finished (none does any more); nodeId/address/incarnation "".
  | (Base & { readonly type: "rollout.started"; readonly stale: number; readonly keep: number })
  | (Base & { readonly type: "rollout.finished"; readonly replaced: number; readonly ready: number })
  | (Base & { readonly type: "replica.scale-set"; readonly operator: string; readonly min: number; readonly max: number })
  // Load jobs (load-jobs.ts). A job holds no instance yet: `incarnation` and `address` are "",
  // the load's incarnation is `loadIncarnation` (so a journal replay never takes a job for an instance).
  // waiting: once per job, when it first cannot be placed now (nodeId ""); failed: once, when it ends failing
  // (nodeId: the node chosen, "" when none was).
  | (Base & { readonly type: "load.waiting"; readonly reason: string; readonly loadIncarnation: string })
  | (Base & { readonly type: "load.failed"; readonly reason: string; readonly code: string; readonly phase: LoadJobPhase; readonly loadIncarnation: string });

/**
 * How an adopted instance was found (proto InstanceAdopted.found_by):
 * `inventory` a running instance the coordinator did not hold; `stop-requested`
 * the agent's record carries a stop request; `open-stop-intent` the journal has
 * an open stop intent for it; `unconfigured` its model is not in the config;
 * `journal` an open stop intent restored at start, before its node reported.
 */
export type AdoptionSource = "inventory" | "stop-requested" | "open-stop-intent" | "unconfigured" | "journal";

export type LoaderEventType = LoaderEvent["type"];

/** Where the loader sends events. Must not throw. */
export interface LoaderEventSink {
  emit(event: LoaderEvent): void;
  /**
   * Emits and resolves once the event is durably journaled (DESIGN §4:
   * `eviction.started` is in the outbox before the stop is sent). Must not
   * reject: a journal failure is the sink's to report.
   */
  emitDurable(event: LoaderEvent): Promise<void>;
}
