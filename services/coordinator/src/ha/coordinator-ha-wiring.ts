import type { Journal } from "@warden/outbox";
import type { DurableStateStore } from "./durable-state-port.js";

/**
 * What the HA runner hands `startCoordinator` for one term of
 * leadership. Without it the coordinator is the single-machine one: file
 * journal and operator settings (config/file-state-store.ts) in its state
 * dir, epoch 0 on every agent command.
 */
export interface CoordinatorHaWiring {
  /** The journal in place of the file journal (`openJetStreamJournal`); the runner owns its lifetime. */
  readonly journal: Journal;
  /** Drains, lost nodes, forgotten instances, policy, scale and node limits (`openKvStateStore`). */
  readonly state: DurableStateStore;
  /** The lease epoch this term won: stamped on every command to an agent. */
  readonly leaderEpoch: () => bigint;
  /** The same epoch as a value, stamped on every audit event of the term (`Event.leader_epoch`). @default 0 */
  readonly termEpoch?: bigint;
  /**
   * An agent refused a command as from an older epoch, or reported a newer
   * one than ours in its heartbeat: another coordinator leads. The runner
   * steps down (called synchronously; it must not throw).
   */
  readonly onSuperseded: (newerEpoch: bigint, detail: string) => void;
  /**
   * True only while this member holds the lease of this term at this moment
   * (checked against the clock, so a process resumed after a pause past its
   * lease sees false before it acts). Gates every decision that runs on a
   * timer — node health marking, the watchdog tick, leftover and freed
   * retries — and the outbox's publishing. @default always true
   */
  readonly mayAct?: () => boolean;
}
