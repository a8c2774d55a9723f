import type { OutboxHealth } from "./outbox-types.js";

/** What the outbox's health is judged from. */
export interface OutboxHealthInputs {
  /** The journal's last refusal of a durable write (a stop intent, the epoch), while it lasts. */
  readonly journalError: string | undefined;
  /** Events the journal refused that wait in the append lane, in order. */
  readonly laneSize: number;
  /** The journal's last refusal of an event the lane still holds. */
  readonly laneError: string | undefined;
  /** At capacity, or not yet drained below the recovery mark since it was. */
  readonly full: boolean;
  readonly capacity: number;
  readonly dropped: number;
  readonly droppedCritical: number;
}

/** The outbox's health: a failing journal first, then a full outbox. */
export function outboxHealth(i: OutboxHealthInputs): OutboxHealth {
  if (i.journalError !== undefined) return { status: "not-serving", reason: `journal failing: ${i.journalError}` };
  if (i.laneSize > 0) return { status: "not-serving", reason: `journal failing: ${String(i.laneSize)} events wait to be journaled in order; last refusal: ${i.laneError ?? "none yet"}` };
  if (i.full) return { status: "not-serving", reason: `outbox full (capacity ${i.capacity}); ${i.dropped} events dropped so far, ${i.droppedCritical} of them critical` };
  return { status: "serving" };
}

/** Same status and reason: a change of either is reported (the reason carries the drop count). */
export function sameHealth(a: OutboxHealth, b: OutboxHealth): boolean {
  const reason = (h: OutboxHealth): string => (h.status === "serving" ? "" : h.reason);
  return a.status === b.status && reason(a) === reason(b);
}
