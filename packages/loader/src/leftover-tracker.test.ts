import { ManualClock, seededRng } from "@warden/common";
import { describe, expect, it } from "vitest";
import { LeftoverTracker, type Leftover } from "./leftover-tracker.js";
import { flush } from "./test-fakes.js";

function setup(o: { stuckAfterMs?: number } = {}) {
  const clock = new ManualClock();
  const attemptsAt: number[] = [];
  const retried: Leftover[] = [];
  const stuck: Leftover[] = [];
  const reaped: Leftover[] = [];
  const nodeChanges: string[] = [];
  let gone = false;
  const tracker = new LeftoverTracker({
    clock,
    rng: seededRng(1),
    backoff: { initialMs: 1_000, factor: 2, maxMs: 8_000, jitter: 0 },
    ...(o.stuckAfterMs === undefined ? {} : { stuckAfterMs: o.stuckAfterMs }),
    retry: async () => {
      attemptsAt.push(clock.now());
      return gone ? { gone: true } : { gone: false, error: `still there at ${String(clock.now())}` };
    },
    onNodeChanged: (n) => nodeChanges.push(n),
    onRetried: (l) => retried.push({ ...l }),
    onStuck: (l) => stuck.push({ ...l }),
    onReaped: (l) => reaped.push({ ...l }),
  });
  /** Steps the clock to each due timer and lets the retry's promise settle. */
  async function run(ms: number): Promise<void> {
    const target = clock.now() + ms;
    for (;;) {
      const next = clock.nextTimerAtMs();
      if (next === undefined || next > target) break;
      clock.advance(next - clock.now());
      await flush();
    }
    clock.advance(target - clock.now());
    await flush();
  }
  const add = (incarnation = "inc-1", nodeId = "n1") =>
    tracker.add({ incarnation, nodeId, model: "m1", address: `${nodeId}:5000`, groups: ["g"], sizeBytes: 42, lastError: "unavailable" });
  return {
    clock,
    tracker,
    attemptsAt,
    retried,
    stuck,
    reaped,
    nodeChanges,
    run,
    add,
    setGone: (v: boolean) => {
      gone = v;
    },
  };
}

describe("LeftoverTracker", () => {
  it("retries with capped exponential backoff until the agent confirms it gone", async () => {
    const s = setup();
    s.add();
    await s.run(1_000 + 2_000 + 4_000 + 8_000 + 8_000);
    expect(s.attemptsAt).toEqual([1_000, 3_000, 7_000, 15_000, 23_000]);
    expect(s.retried.map((l) => l.attempts)).toEqual([1, 2, 3, 4, 5]);
    expect(s.tracker.get("inc-1")?.lastError).toBe("still there at 23000");
    s.setGone(true);
    await s.run(8_000);
    expect(s.attemptsAt).toHaveLength(6);
    expect(s.reaped).toHaveLength(1);
    expect(s.reaped[0]?.attempts).toBe(6);
    expect(s.tracker.size).toBe(0);
    // reaped: no timer left, nothing retried again
    expect(s.clock.pendingTimers()).toBe(0);
    await s.run(60_000);
    expect(s.attemptsAt).toHaveLength(6);
  });

  it("flags a leftover stuck once after the configured time, and keeps retrying it", async () => {
    const s = setup({ stuckAfterMs: 10_000 });
    s.add();
    await s.run(7_000);
    expect(s.stuck).toHaveLength(0);
    await s.run(8_000); // attempt at 15 000 ≥ 10 000
    expect(s.stuck).toHaveLength(1);
    expect(s.stuck[0]?.sinceMs).toBe(0);
    expect(s.tracker.get("inc-1")?.stuck).toBe(true);
    const before = s.attemptsAt.length;
    await s.run(40_000);
    expect(s.attemptsAt.length).toBeGreaterThan(before);
    expect(s.stuck).toHaveLength(1);
  });

  it("exposes a node's leftovers as occupancy entries and reports node changes", () => {
    const s = setup();
    s.add("inc-1", "n1");
    s.add("inc-2", "n1");
    s.add("inc-3", "n2");
    expect(s.nodeChanges).toEqual(["n1", "n1", "n2"]);
    expect(s.tracker.occupancy("n1")).toEqual([
      { kind: "leftover", key: "inc-1", model: "m1", groups: ["g"], sizeBytes: 42 },
      { kind: "leftover", key: "inc-2", model: "m1", groups: ["g"], sizeBytes: 42 },
    ]);
    expect(s.tracker.occupancy("n2")).toHaveLength(1);
    expect(s.tracker.occupancy("n3")).toEqual([]);
    s.tracker.remove("inc-3");
    expect(s.tracker.occupancy("n2")).toEqual([]);
    expect(s.nodeChanges.at(-1)).toBe("n2");
  });

  it("adding an existing incarnation is a no-op (one record, one timer)", () => {
    const s = setup();
    const a = s.add();
    const b = s.add();
    expect(b).toBe(a);
    expect(s.tracker.size).toBe(1);
    expect(s.clock.pendingTimers()).toBe(1);
  });

  it("remove stops the retries", async () => {
    const s = setup();
    s.add();
    await s.run(1_000);
    expect(s.attemptsAt).toHaveLength(1);
    expect(s.tracker.remove("inc-1")?.incarnation).toBe("inc-1");
    expect(s.clock.pendingTimers()).toBe(0);
    await s.run(60_000);
    expect(s.attemptsAt).toHaveLength(1);
    expect(s.reaped).toHaveLength(0);
    expect(s.tracker.remove("inc-1")).toBeUndefined();
  });

  it("retryNodeNow retries a node's leftovers at once, without waiting for the backoff", async () => {
    const s = setup();
    s.add("inc-1", "n1");
    s.add("inc-2", "n2");
    s.setGone(true);
    s.tracker.retryNodeNow("n1");
    await flush();
    expect(s.reaped.map((l) => l.incarnation)).toEqual(["inc-1"]);
    expect(s.tracker.get("inc-2")).toBeDefined();
  });

  it("close cancels every timer", async () => {
    const s = setup();
    s.add("inc-1");
    s.add("inc-2");
    s.tracker.close();
    expect(s.clock.pendingTimers()).toBe(0);
    await s.run(60_000);
    expect(s.attemptsAt).toHaveLength(0);
  });

  it("a leftover re-adopted while its forgotten self's retry is still out is retried once that one settles", async () => {
    const clock = new ManualClock();
    const answers: ((r: { gone: false; error: string }) => void)[] = [];
    const tracker = new LeftoverTracker({
      clock,
      rng: seededRng(1),
      backoff: { initialMs: 1_000, factor: 2, maxMs: 8_000, jitter: 0 },
      retry: () => new Promise((resolve) => answers.push(resolve)),
      onNodeChanged: () => undefined,
      onRetried: () => undefined,
      onStuck: () => undefined,
      onReaped: () => undefined,
    });
    const add = () => tracker.add({ incarnation: "inc-1", nodeId: "n1", model: "m1", address: "n1:5000", groups: [], sizeBytes: 0, lastError: "unavailable" });
    add();
    clock.advance(1_000);
    await flush();
    expect(answers).toHaveLength(1); // the first retry is out
    tracker.remove("inc-1"); // an operator's forget
    const again = add(); // re-adopted from the next inventory
    clock.advance(1_000); // its first retry is due while the old one still runs
    await flush();
    expect(answers).toHaveLength(1);
    answers[0]?.({ gone: false, error: "deadline exceeded" });
    await flush();
    expect(clock.pendingTimers()).toBe(1); // not dropped: scheduled again
    clock.advance(clock.nextTimerAtMs()! - clock.now());
    await flush();
    expect(answers).toHaveLength(2);
    expect(tracker.get("inc-1")).toBe(again);
  });
});
