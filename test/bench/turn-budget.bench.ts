/**
 * The heartbeat turn budget with a backlog: N streams, one heartbeat each, all
 * read while a turn's budget is spent, then answered over the following turns
 * (10 ms of work a turn, each heartbeat's work 20 µs of real CPU: about what
 * applying one costs at 10 000 nodes). CPU per answered heartbeat, all turns
 * included, of the TurnBudget (the deferred wait in one queue; a turn resumes
 * only what its budget runs) against the same budget as it was before, in
 * this file: every deferred heartbeat awaits one promise shared by the turn,
 * so each turn wakes the whole backlog and all but the turn's share wait anew.
 * Backlogs of 1 000 and 4 000 (at 10 000 nodes the heartbeat p99 of 0.3–0.6 s
 * means a few thousand wait at the worst moments).
 */
import { TurnBudget } from "../../services/coordinator/src/nodes/turn-budget.js";
import type { BenchResult } from "./bench-result.js";

const budgetMs = 10;
const workUs = 20;

const nowMs = (): number => performance.now();

/** `ms` of real CPU. */
function busy(ms: number): void {
  const end = nowMs() + ms;
  while (nowMs() < end) {
    // busy
  }
}

/** One heartbeat's work: `workUs` of real CPU. */
function work(): void {
  busy(workUs / 1_000);
}

/** The turn's budget, spent by other streams before these are read. */
function spendTurn(): void {
  busy(budgetMs);
}

const macrotask = (): Promise<void> => new Promise((r) => setImmediate(r));

/** The budget before: one promise per turn, shared by everything deferred in it. */
class SharedWaitBudget {
  private spentMs: number | undefined;
  private next: Promise<void> | undefined;
  wakeups = 0;

  wait(): Promise<void> | undefined {
    if (this.spentMs === undefined) {
      this.spentMs = 0;
      void macrotask().then(() => {
        if (this.next === undefined) this.spentMs = undefined;
      });
      return undefined;
    }
    if (this.spentMs < budgetMs) return undefined;
    this.next ??= macrotask().then(() => {
      this.next = undefined;
      this.spentMs = undefined;
    });
    return this.next;
  }

  run(fn: () => void): void {
    const start = nowMs();
    fn();
    if (this.spentMs !== undefined) this.spentMs += nowMs() - start;
  }
}

/** Answers `streams` heartbeats deferred behind a spent turn with the shared-wait budget; resolves when all are (the spent turn not counted). */
function drainShared(streams: number): Promise<Drained> {
  const b = new SharedWaitBudget();
  void b.wait(); // opens the turn (undefined)
  b.run(spendTurn);
  let answered = 0;
  const before = process.cpuUsage();
  return new Promise((resolve) => {
    const stream = (): void => {
      const later = b.wait();
      if (later !== undefined) {
        void later.then(() => {
          b.wakeups++;
          stream();
        });
        return;
      }
      b.run(work);
      if (++answered === streams) resolve(drained(before, streams, b.wakeups));
    };
    for (let i = 0; i < streams; i++) stream();
  });
}

/** The same with the TurnBudget. */
function drainQueued(streams: number): Promise<Drained> {
  const b = new TurnBudget({ budgetMs, nowMs });
  b.has();
  b.run(spendTurn);
  let answered = 0;
  const before = process.cpuUsage();
  return new Promise((resolve) => {
    const stream = (): void => {
      if (!b.has()) {
        b.defer(stream);
        return;
      }
      b.run(work);
      if (++answered === streams) resolve(drained(before, streams, b.resumed));
    };
    for (let i = 0; i < streams; i++) stream();
  });
}

interface Drained {
  /** CPU per heartbeat answered, from the first deferral to the last answer. */
  readonly us: number;
  readonly wakeups: number;
}

function drained(before: NodeJS.CpuUsage, streams: number, wakeups: number): Drained {
  const used = process.cpuUsage(before);
  return { us: (used.user + used.system) / streams, wakeups };
}

async function row(streams: number): Promise<BenchResult> {
  await drainQueued(streams);
  await drainShared(streams);
  const ours: number[] = [];
  const base: number[] = [];
  let oursWakeups = 0;
  let baseWakeups = 0;
  for (let round = 0; round < 5; round++) {
    const o = await drainQueued(streams);
    const s = await drainShared(streams);
    ours.push(o.us);
    base.push(s.us);
    oursWakeups = o.wakeups;
    baseWakeups = s.wakeups;
  }
  return {
    name: `heartbeat turn budget, ${String(streams)} heartbeats deferred behind a spent turn, ${String(workUs)} µs of work each, ${String(budgetMs)} ms a turn: CPU per heartbeat answered, best of 5 (waiters resumed: ${String(oursWakeups)} against ${String(baseWakeups)})`,
    baseline: "one promise per turn shared by every deferred heartbeat (the budget before)",
    ours: Math.min(...ours),
    baselineValue: Math.min(...base),
    unit: "µs CPU/heartbeat",
    higherIsBetter: false,
  };
}

export async function run(): Promise<BenchResult[]> {
  return [await row(1_000), await row(4_000)];
}
