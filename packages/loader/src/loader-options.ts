import type { Clock, Rng, BackoffPolicy } from "@warden/common";
import type { PolicyPatch, WatchdogCaps } from "@warden/watchdog";
import type { CooldownPolicy } from "./load-cooldown.js";
import type { LoaderEventSink } from "./loader-event.js";
import type { LoadJobLimits } from "./load-jobs.js";
import type { InventoryPort, PlacementPort } from "./loader-types.js";
import type { ModelSpec } from "./model-spec.js";
import type { AgentDirectory, BackendConnector, BackendHandle, Sleep, StopIntentJournal } from "./ports.js";

/** Stop timing (DESIGN §5). */
export interface StopTimings {
  /** Bounds lifecycle lock + busy wait + Free. @default 30000 */
  readonly stopTimeoutMs: number;
  /** @default 5000 */
  readonly freeTimeoutMs: number;
  /** StopBackend RPC deadline: SIGTERM grace + 5 s. @default 15000 */
  readonly stopRpcTimeoutMs: number;
  /** Busy-wait poll period. @default 100 */
  readonly busyPollMs: number;
}

export const defaultStopTimings: StopTimings = { stopTimeoutMs: 30_000, freeTimeoutMs: 5_000, stopRpcTimeoutMs: 15_000, busyPollMs: 100 };

export interface LoaderOptions<H extends BackendHandle> {
  readonly clock: Clock;
  readonly rng: Rng;
  readonly sleep: Sleep;
  readonly agents: AgentDirectory;
  readonly backends: BackendConnector<H>;
  readonly journal: StopIntentJournal;
  readonly events: LoaderEventSink;
  readonly placement: PlacementPort;
  readonly inventories: InventoryPort;
  readonly mintIncarnation: () => string;
  readonly models: readonly ModelSpec[];
  readonly policy?: PolicyPatch;
  readonly caps?: Partial<WatchdogCaps>;
  readonly stop?: Partial<StopTimings>;
  /**
   * DESIGN §5: 30 × 1 s. `intervalMs`: the pause between admission attempts
   * while a load waits; `maxAttempts`: at most this many attempts in a row
   * that ask again at once (victims settled), and a drain move's deferrals.
   */
  readonly enforcement?: { readonly maxAttempts: number; readonly intervalMs: number };
  /**
   * How long a load waits at admission when no node can take it now for a
   * reason that ends by itself (draining, unreachable, none ready, room held
   * by busy, loading, pinned or stopping instances), then fails UNAVAILABLE
   * naming it. @default 30000
   */
  readonly loadWaitMs?: number;
  /** How many failed load jobs are kept, and for how long (load-jobs.ts). */
  readonly loadJobs?: Partial<LoadJobLimits>;
  readonly cooldown?: CooldownPolicy;
  readonly leftoverBackoff?: BackoffPolicy;
  readonly stuckAfterMs?: number;
  /** Per-model waiting calls (DESIGN §5: 512). */
  readonly maxWaitingPerModel?: number;
  /**
   * Resolves when new loads may start. A restarted coordinator passes a gate
   * that opens once the agents' inventories had a chance to arrive, so a load
   * never starts a second copy of an instance that is about to be adopted.
   */
  readonly admissionGate?: Promise<void>;
  /**
   * HA: false while this coordinator does not hold the leader lease (paused,
   * or resumed from a pause past its lease). The decisions that run on timers
   * — the watchdog tick with the replica reconciler, leftover stop retries and
   * freed-stop retries — skip their turn (a retry is rescheduled, not counted)
   * and act, or emit, nothing. @default always true
   */
  readonly mayAct?: () => boolean;
  /**
   * Which models each replica reconciler pass decides for: `changed`, those
   * whose replica picture changed or whose own timer is due (replica-work.ts);
   * `every`, every configured model — the reference `changed` is checked
   * against in tests, the same decisions for more work. @default "changed"
   */
  readonly replicaPass?: "changed" | "every";
  /** Incarnations remembered as confirmed gone, oldest out. @default 4096 */
  readonly maxGoneIncarnations?: number;
  /** Reports what the loader decided but could not act on (bugs, best-effort failures). */
  readonly onWarning?: (msg: string, meta: Record<string, unknown>) => void;
  /**
   * Told, in the same turn, as each routed call begins and ends, with its
   * instance's in-flight count after the change (the dashboard's busy state
   * and call rates). Must not throw or block: it runs on the call path.
   */
  readonly onCall?: (c: CallChange) => void;
}

/** One routed call began (`durationMs` absent) or ended on an instance. */
export interface CallChange {
  readonly model: string;
  readonly incarnation: string;
  readonly nodeId: string;
  /** The instance's calls in flight after this change. */
  readonly inFlight: number;
  /** Present when the call ended: from its lease to its completion, on the loader's clock. */
  readonly durationMs?: number;
}
