import type { EventQueue } from "./event-queue.js";
import type { VirtualClock } from "./virtual-clock.js";

/**
 * One macrotask turn: every microtask queued by the event just run (promise
 * chains of the real decision code) completes before the next virtual event.
 * The only host scheduling primitive on the simulated path; nothing else is
 * pending in the process, so the order is a function of the seed alone.
 */
export function drainMicrotasks(): Promise<void> {
  return new Promise<void>((resolve) => setImmediate(resolve));
}

export interface RunLoopHooks {
  /** Called after each event and its microtasks: the checkers run here. */
  afterStep(label: string): void;
  /** The decision code (or the harness) threw synchronously inside an event: a bug. */
  onThrow(label: string, err: unknown): void;
  /** Stop early (a violation was found). */
  shouldStop(): boolean;
}

/**
 * Pops the next event at its virtual time, runs it, drains microtasks, calls
 * the step hook; until the queue is empty or `untilMs` is passed. `stallUntil`
 * (fault F15: a 30 s event-loop stall) makes every event due before it run at it.
 */
export async function runUntil(queue: EventQueue, clock: VirtualClock, untilMs: number, hooks: RunLoopHooks, stall: { untilMs: number }): Promise<number> {
  let steps = 0;
  for (;;) {
    const at = queue.peekAtMs();
    if (at === undefined || at > untilMs) break;
    const e = queue.pop();
    if (e === undefined) continue;
    clock.advanceTo(Math.max(at, stall.untilMs));
    try {
      e.fn();
    } catch (err) {
      hooks.onThrow(e.label, err);
    }
    await drainMicrotasks();
    steps++;
    hooks.afterStep(e.label);
    if (hooks.shouldStop()) return steps;
  }
  clock.advanceTo(untilMs);
  return steps;
}
