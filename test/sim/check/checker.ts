import type { Event } from "@warden/proto";
import type { HeartbeatReport } from "@warden/cluster";
import type { Lease, LoaderEvent, StopRequest } from "@warden/loader";
import type { SimCoordinator } from "../coordinator/sim-coordinator.js";
import type { SimWorld } from "../world/sim-world.js";
import type { AdmissionObservation } from "../../../services/coordinator/src/routing/admission-gate.js";

/** A broken invariant: which one (reliability.md number and name) and what was seen. */
export interface Violation {
  readonly invariant: string;
  readonly message: string;
  readonly atMs: number;
}

/** One prefix routing decision as the route hint saw it (step-runner.ts). */
export interface PrefixPick {
  readonly model: string;
  readonly candidates: readonly { readonly incarnation: string; readonly inFlight: number }[];
  readonly chosen: string | undefined;
  readonly marginCalls: number;
}

/** What a checker reads: the world (ground truth) and the coordinator generation up, if any. */
export interface CheckContext {
  readonly world: SimWorld;
  readonly coord: SimCoordinator | undefined;
  /** Incarnations with a StopBackend in flight from the coordinator now. */
  readonly stopsInFlight: ReadonlyMap<string, number>;
  readonly report: (invariant: string, message: string) => void;
}

/**
 * An invariant checker. Every hook is optional; each compares Warden's view
 * with the ground truth and calls `ctx.report` on a violation.
 */
export interface Checker {
  readonly name: string;
  /** After every simulation step (one event and its microtasks). */
  afterStep?(ctx: CheckContext, label: string): void;
  /** Every event the coordinator committed (after its journal append). */
  onEvent?(ctx: CheckContext, e: Event): void;
  /** The loader emitted an event: at its decision, before the journal (onEvent comes later, maybe after a stall). */
  onLoaderEvent?(ctx: CheckContext, e: LoaderEvent): void;
  /** A model's admission gate let a call in, queued one, or saw one leave its queue (classes, fair sharing); `gate` numbers the gates of a run. */
  onAdmission?(ctx: CheckContext, o: AdmissionObservation, gate: number): void;
  /** A prefix-routed call's route hint picked `chosen` among the routable `candidates` (their calls in flight then), under `marginCalls`. */
  onPrefixPick?(ctx: CheckContext, pick: PrefixPick): void;
  /** A lease was granted to a call. */
  onLease?(ctx: CheckContext, lease: Lease): void;
  /** A StopBackend is leaving the coordinator (before it is marked in flight). */
  onStopSent?(ctx: CheckContext, req: StopRequest, nodeId: string): void;
  /** The loader asked an agent to start a backend. */
  onStartSent?(ctx: CheckContext, nodeId: string, model: string, incarnation: string): void;
  /** A heartbeat was handed to the coordinator; `applied` when it was not stale. */
  afterHeartbeat?(ctx: CheckContext, hb: HeartbeatReport, sentAtMs: number, applied: boolean): void;
  /** Once faults stopped and the cluster had time to converge (invariants 9, 10). */
  atQuiescence?(ctx: CheckContext): void;
}
