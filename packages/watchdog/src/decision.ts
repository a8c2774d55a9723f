import type { InstanceStateName, InstanceView } from "./instance.js";
import type { PressureChange } from "./memory-pressure.js";
import type { StopCommand } from "./stop-command.js";

/** Why a selection fell short: counts of what could not be selected. */
export interface Shortfall {
  /** Victims still needed after this selection. */
  readonly missing: number;
  readonly pinned: number;
  readonly busy: number;
  readonly loading: number;
  readonly reserved: number;
  readonly freed: number;
  readonly pending: number;
  readonly leftovers: number;
  readonly orphans: number;
  /** Instances a restarted coordinator's journal places on the node, not reported by it yet; absent when none. */
  readonly unconfirmed?: number;
  /** Ready victims the admission was asked to spare (AdmissionRequest.spare); absent when none. */
  readonly spared?: number;
}

/**
 * Result of a policy selection (`enforceGroups`, `enforceLimit`): the victims
 * were detached in the same call; the caller must send every stop and settle
 * each. `needMore` is the selection's own verdict; any failed stop sets it too
 * (the facade adds that).
 */
export interface EnforcementDecision {
  readonly stops: readonly StopCommand[];
  readonly needMore: boolean;
  readonly shortfall: Shortfall;
}

/** `policy.limit-exceeded`: a load admitted over the limit because pinned instances alone caused the shortfall. */
export interface LimitExceeded {
  readonly type: "policy.limit-exceeded";
  readonly nodeId: string;
  readonly model: string;
  readonly incarnation: string;
  readonly limit: number;
  /** Occupied slots including the admitted load. */
  readonly occupied: number;
  readonly pinnedIncarnations: readonly string[];
}

/** Occupancy of one node, DESIGN §3.4 item 3. */
export interface Occupancy {
  readonly reserved: number;
  readonly loading: number;
  readonly ready: number;
  readonly freed: number;
  readonly pendingEviction: number;
  readonly leftovers: number;
  readonly orphans: number;
  /** Instances known only from a restarted coordinator's journal, the node not heard from since. */
  readonly unconfirmed: number;
  readonly total: number;
  /** Sum of size estimates of everything counted above (unknown sizes count 0): placement's accounted bytes. */
  readonly accountedBytes: number;
}

/**
 * The outcome of one atomic admission step on a node.
 * - `admitted`: reserved under the incarnation; `limitExceeded` set when
 *   pins alone kept it over the limit (emit the event).
 * - `wait`: not admitted. Send `stops` (possibly none), wait for all of them
 *   to settle, then ask again — at once when `needMore` is false, after the
 *   retry interval when it is true.
 */
export type AdmissionDecision =
  | { readonly t: "admitted"; readonly occupancy: Occupancy; readonly limitExceeded: LimitExceeded | undefined }
  | { readonly t: "wait"; readonly cause: "group" | "limit"; readonly stops: readonly StopCommand[]; readonly needMore: boolean; readonly shortfall: Shortfall };

/** What a tick selected (busy → idle → memory). Ticks never wait for stops. */
export interface TickDecision {
  readonly stops: readonly StopCommand[];
  /** Addresses with request state but no identity whose state was cleared (LocalAI "unresolvable"). */
  readonly untrackedAddresses: readonly string[];
  readonly pressureChanges: readonly PressureChange[];
}

/** Result of an explicit selection (admin unload, drain, config removal, health failure, retry). */
export type ExplicitSelection =
  | { readonly t: "stop"; readonly command: StopCommand }
  /** Already pending: join the stop in flight; no second stop. */
  | { readonly t: "joined"; readonly command: StopCommand }
  /** Admitted but not spawned: cancel the start and `releaseReservation`. */
  | { readonly t: "reserved" }
  | { readonly t: "unknown" };

/**
 * The settle table (DESIGN §3.2 step 4), one variant per row.
 * `not-pending`: the incarnation had no stop in flight (a second settle): nothing changed.
 */
export type SettleResult =
  | { readonly row: 1; readonly t: "replaced"; readonly instance: InstanceView; readonly replacedBy: string }
  | { readonly row: 2; readonly t: "stopped"; readonly instance: InstanceView; readonly clearedRequestIds: readonly number[] }
  | {
      readonly row: 3;
      readonly t: "registered-again";
      readonly instance: InstanceView;
      readonly state: Exclude<InstanceStateName, "reserved">;
      readonly error: string;
    }
  | {
      readonly row: 4;
      readonly t: "dropped";
      readonly instance: InstanceView;
      /** Open requests closed with terminal reason `instance-dropped`; their later completions are no-ops. */
      readonly openRequestIds: readonly number[];
      readonly terminalReason: "instance-dropped";
      readonly error: string;
    }
  | { readonly row: 0; readonly t: "not-pending"; readonly incarnation: string };

/** Result of `remove` (failed load, process exit, forget). */
export type RemoveResult =
  | { readonly t: "removed"; readonly instance: InstanceView; readonly clearedRequestIds: readonly number[] }
  | { readonly t: "released"; readonly instance: InstanceView }
  /** A stop is in flight: the settle will clear it (as row 2, the process being gone). */
  | { readonly t: "pending"; readonly instance: InstanceView }
  | { readonly t: "unknown" };
