import type { PriorityClass } from "./admission-types.js";

interface WaitingEntry {
  readonly cls: PriorityClass;
  readonly principal: string;
  /** Admissions of one other principal's calls of this class this call may see before its own. */
  readonly turns: number;
  /** Admissions seen per other principal while this call waits. */
  readonly seen: Map<string, number>;
}

/**
 * The fairness bound of {@link AdmissionQueue} within one class, as a
 * checker (the property test and the simulation judge the queue with it;
 * production never runs it). Round robin between principals promises:
 *
 *   while a call of principal P waits in class c, with k calls of P's in
 *   class c waiting ahead of it when it was queued, no other principal has
 *   more than k + 1 calls of class c let in.
 *
 * So a principal's first waiting call is delayed by at most one turn of each
 * other principal, however many calls they have waiting — a flood buys its
 * sender turns, not others' delay. Calls of higher classes may go first
 * without limit (strict priority); calls that leave the queue without being
 * let in (cancelled, pushed out) end their claim. Work: O(calls of the class
 * waiting) per admission.
 */
export class FairShareBound<T> {
  private readonly waiting = new Map<T, WaitingEntry>();
  /** Calls waiting per class and principal (the k of a newly queued call). */
  private readonly depth = new Map<string, number>();

  /** `ticket` was queued. */
  queued(ticket: T, cls: PriorityClass, principal: string): void {
    const key = `${cls}\u0000${principal}`;
    const k = this.depth.get(key) ?? 0;
    this.depth.set(key, k + 1);
    this.waiting.set(ticket, { cls, principal, turns: k + 1, seen: new Map() });
  }

  /** `ticket` left the queue without being let in (cancelled or pushed out); unknown tickets are ignored. */
  gone(ticket: T): void {
    const w = this.waiting.get(ticket);
    if (w === undefined) return;
    this.waiting.delete(ticket);
    const key = `${w.cls}\u0000${w.principal}`;
    const k = (this.depth.get(key) ?? 1) - 1;
    if (k === 0) this.depth.delete(key);
    else this.depth.set(key, k);
  }

  /**
   * A call of `cls` from `principal` was let in (`ticket`: from the queue, or
   * straight through). Returns a description of each waiting call it puts
   * past the bound (empty: the bound holds).
   */
  admitted(ticket: T, cls: PriorityClass, principal: string): string[] {
    this.gone(ticket);
    const out: string[] = [];
    for (const w of this.waiting.values()) {
      if (w.cls !== cls || w.principal === principal) continue;
      const n = (w.seen.get(principal) ?? 0) + 1;
      w.seen.set(principal, n);
      if (n > w.turns) out.push(`a ${cls} call of ${w.principal} waited through ${String(n)} admissions of ${principal}'s ${cls} calls (bound ${String(w.turns)}: ${String(w.turns - 1)} of its own calls were ahead of it)`);
    }
    return out;
  }

  /** Calls being tracked (tests). */
  get size(): number {
    return this.waiting.size;
  }
}
