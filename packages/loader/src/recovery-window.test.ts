import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { RecoveryWindow } from "./recovery-window.js";

// The recovery window after a start or a takeover ends when every node the
// journal names has reported (or was lost), or at its deadline — no longer on
// a fixed timer. Before, admission opened 3 s after the start whatever the
// nodes had done: before slow agents reported (the journal's instances on
// them then unconfirmed), and long after fast ones had.

const nodes = (deadlineMs: number, ...ids: string[]): Map<string, number> => new Map(ids.map((id) => [id, deadlineMs]));

describe("RecoveryWindow", () => {
  it("opens the moment the last named node reports, before its deadline", () => {
    const w = new RecoveryWindow(nodes(3_000, "a", "b"), 0, 3_000);
    expect(w.nextDeadlineMs()).toBe(3_000);
    expect(w.settle("a", 100)).toBe(false);
    expect(w.settle("x", 150)).toBe(false);
    expect(w.pending()).toEqual(["b"]);
    expect(w.settle("b", 200)).toBe(true);
    expect(w.state).toEqual({ t: "open", cause: "all-reported", atMs: 200 });
    expect(w.nextDeadlineMs()).toBeUndefined();
    // Later reports change nothing.
    expect(w.settle("b", 300)).toBe(false);
  });

  it("a lost node counts as settled", () => {
    const w = new RecoveryWindow(nodes(3_000, "a"), 0, 3_000);
    expect(w.settle("a", 10)).toBe(true);
    expect(w.open).toBe(true);
  });

  it("a node that never reports is given up on at its own deadline; the others' reports still count", () => {
    const w = new RecoveryWindow(new Map([["slow", 5_000], ["fast", 2_000]]), 0, 5_000);
    expect(w.expire(1_999)).toBe(false);
    expect(w.settle("slow", 2_500)).toBe(false);
    expect(w.nextDeadlineMs()).toBe(2_000);
    expect(w.expire(2_600)).toBe(true);
    expect(w.state).toEqual({ t: "open", cause: "deadline", atMs: 2_600 });
    expect(w.lateNodes()).toEqual(["fast"]);
  });

  it("no node named: a fixed wait of the upper bound, as before; zero: open at once", () => {
    const w = new RecoveryWindow(new Map(), 0, 3_000);
    expect(w.open).toBe(false);
    expect(w.nextDeadlineMs()).toBe(3_000);
    expect(w.settle("a", 10)).toBe(false);
    expect(w.expire(2_999)).toBe(false);
    expect(w.expire(3_000)).toBe(true);
    expect(new RecoveryWindow(nodes(1_000, "a"), 0, 0).state).toEqual({ t: "open", cause: "no-window", atMs: 0 });
  });

  it("property: it opens exactly when every named node has settled or passed its deadline, never earlier, never later", () => {
    const step = fc.oneof(fc.record({ t: fc.constant("settle" as const), node: fc.nat(4), dtMs: fc.nat(2_000) }), fc.record({ t: fc.constant("expire" as const), dtMs: fc.nat(2_000) }));
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 6_000 }), { minLength: 1, maxLength: 5 }), fc.array(step, { maxLength: 40 }), (deadlines, steps) => {
        const named = new Map(deadlines.map((d, i) => [`n${String(i)}`, d]));
        const w = new RecoveryWindow(named, 0, 6_000);
        const settled = new Set<string>();
        let now = 0;
        let openedAt: number | undefined;
        for (const s of steps) {
          now += s.dtMs;
          const opened = s.t === "settle" ? w.settle(`n${String(s.node)}`, now) : w.expire(now);
          if (s.t === "settle") settled.add(`n${String(s.node)}`);
          if (opened) openedAt = now;
          // Never earlier: open means every named node reported or is past its own deadline.
          if (w.open) expect([...named].every(([id, d]) => settled.has(id) || d <= now)).toBe(true);
          // Never later: the last report opens it, and so does an expire at or past every unsettled deadline.
          if ([...named.keys()].every((id) => settled.has(id))) expect(w.open).toBe(true);
          if (s.t === "expire" && [...named].every(([id, d]) => settled.has(id) || d <= now)) expect(w.open).toBe(true);
        }
        if (openedAt !== undefined) expect(w.state).toMatchObject({ t: "open", atMs: openedAt });
      }),
      { numRuns: 300 },
    );
  });
});
