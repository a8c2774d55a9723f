import type { Clock } from "@warden/common";
import type { WatchdogCaps } from "./caps.js";
import type { OccupancyEntry } from "./instance.js";
import type { NodeMemory } from "./memory-pressure.js";
import type { ModelRule } from "./model-rules.js";
import type { WatchdogPolicy } from "./policy.js";
import type { RequestTracker } from "./request-tracker.js";
import type { TickSchedule } from "./tick-schedule.js";
import type { DetachedState, StopCommand } from "./stop-command.js";

/** The one question the core asks the loader, synchronously, inside `settle`. */
export interface LoaderQuery {
  /**
   * True while the loader holds `model` at `address` under `incarnation`; a
   * load in progress there counts (LocalAI W4). Must not call back into the
   * watchdog.
   */
  hasModelAtAddress(model: string, address: string, incarnation: string): boolean;
}

export type RecState =
  | { readonly t: "reserved"; readonly sinceMs: number }
  | { readonly t: "loading"; readonly sinceMs: number }
  | { readonly t: "ready"; readonly sinceMs: number }
  | { readonly t: "freed"; readonly sinceMs: number }
  | { readonly t: "pending"; readonly sinceMs: number; from: DetachedState; readonly command: StopCommand; exited: boolean };

export interface InstanceRecord {
  readonly incarnation: string;
  readonly nodeId: string;
  readonly model: string;
  readonly seq: number;
  address: string | undefined;
  /**
   * When `address` was attached, on the `nextSeq` counter (undefined while
   * reserved). `seq` orders reservations, not addresses: a settle's row 1 needs
   * which record took the address later (DESIGN §3.2 step 4, "meanwhile").
   */
  addressSeq: number | undefined;
  sizeBytes: number;
  gpu: number | undefined;
  state: RecState;
  /** The address this record is indexed under (kept by `setState` only). */
  indexedAddress: string | undefined;
}

export interface NodeRecord {
  readonly nodeId: string;
  /** Creation order (the order of `CoreState.nodes`): the memory reclaimer follows it. */
  readonly seq: number;
  readonly instances: Set<InstanceRecord>;
  occupancy: readonly OccupancyEntry[];
  memory: NodeMemory | undefined;
}

/**
 * Everything the watchdog core holds, in one object the `WatchdogCore` owns
 * and passes explicitly to the modules that implement its rules. Only those
 * modules, called from the core's methods, mutate it; the indexes
 * (`records`, `atAddress`, `byModel`, `nodes`, `loaded`) change only through
 * `setState` (instance-index.ts).
 */
export interface CoreState {
  /** Only `now()` is used: the core never schedules. */
  readonly clock: Pick<Clock, "now">;
  readonly loader: LoaderQuery;
  readonly caps: WatchdogCaps;
  /** Replaced whole by `updatePolicy` (core-policy.ts), never edited in place. */
  policy: WatchdogPolicy;
  /** `policy.pinnedModels` as a set, rebuilt with the policy. */
  pinned: ReadonlySet<string>;
  /** Per-model idle floor and idle timeout (model-rules.ts); replaced whole by `setModelRules`. */
  modelRules: ReadonlyMap<string, ModelRule>;
  readonly requests: RequestTracker;
  /** Which addresses' busy or idle timers are due (tick-schedule.ts); `setState` and the policy keep it told. */
  readonly schedule: TickSchedule;
  /**
   * Models whose instances changed (a transition, or calls starting or ending
   * at one's address) since `takeChangedModels`; undefined until it is first
   * called, so a core nobody asks collects nothing.
   */
  changedModels: Set<string> | undefined;
  readonly records: Map<string, InstanceRecord>;
  readonly atAddress: Map<string, Set<InstanceRecord>>;
  readonly byModel: Map<string, Set<InstanceRecord>>;
  /**
   * model → the change count at the last transition, addition or removal of
   * one of its records (kept by `setState` only; dropped with the model's
   * last record, so 0 means "none"). One counter for all models: a count is
   * never reused, so an unchanged count means unchanged records.
   */
  readonly modelVersions: Map<string, number>;
  modelChanges: number;
  readonly nodes: Map<string, NodeRecord>;
  loaded: number;
  nextSeq: number;
  nextNodeSeq: number;
  /**
   * Nodes the memory reclaimer looks at on the next tick: those with pressure
   * on (a reading turns it on; a tick may turn it off or reclaim), and every
   * node with a reading after the pressure threshold changes. A node with
   * pressure off and an unchanged threshold has nothing a tick could change.
   */
  readonly memoryWatch: Set<NodeRecord>;
  /**
   * Nodes whose agent is unreachable (serving through its outage): nothing
   * there is evicted by the idle, busy or memory paths — a stop needs the
   * agent, and one sent now would only leave a leftover behind.
   */
  readonly evictionsHeld: Set<string>;
  /**
   * The models that share one of `groups` with `model`, under `policy` (whose
   * group table is replaced whole, never edited): placement asks the same of
   * every node, so the group check per instance is one set lookup.
   */
  conflicts: { readonly policy: WatchdogPolicy; readonly model: string; readonly groups: readonly string[]; readonly models: ReadonlySet<string> } | undefined;
}

export function isRegistered(t: RecState["t"]): t is DetachedState {
  return t === "loading" || t === "ready" || t === "freed";
}
