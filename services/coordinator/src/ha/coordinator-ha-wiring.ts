import type { Journal } from "@warden/outbox";
import type { Logger } from "@warden/common";
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

/**
 * The audit publish fence of one term: publishes carry the term's epoch and
 * are sent only while `mayAct` holds; a stream whose last event is of a newer
 * epoch refuses them, and `onSuperseded` steps this member down.
 */
export function auditFenceOf(ha: CoordinatorHaWiring, log: Logger): { writerEpoch: () => bigint | undefined; onSuperseded: (newer: bigint, mine: bigint) => void } {
  const epoch = ha.termEpoch ?? ha.leaderEpoch();
  return {
    writerEpoch: () => (ha.mayAct?.() === false ? undefined : epoch),
    onSuperseded: (newer, mine) => {
      log.warn("audit stream holds an event of a newer leader epoch: this member's publishes are refused", { newer: newer.toString(), mine: mine.toString() });
      ha.onSuperseded(newer, `the audit stream's last event is of leader epoch ${newer.toString()}`);
    },
  };
}
