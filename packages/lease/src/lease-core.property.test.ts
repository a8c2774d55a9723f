import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { runLeaseSim } from "./lease-sim.js";

const maxDrift = 0.05; // well inside the ~9 % the default margin absorbs

const scenario = fc.integer({ min: 2, max: 3 }).chain((nodes) =>
  fc.record({
    seed: fc.integer(),
    nodes: fc.constant(nodes),
    // Extremes are where the margin earns its keep, so they come up often.
    driftRates: fc.array(fc.oneof(fc.constant(-maxDrift), fc.constant(maxDrift), fc.double({ min: -maxDrift, max: maxDrift, noNaN: true })), {
      minLength: nodes,
      maxLength: nodes,
    }),
    clockOffsetsMs: fc.array(fc.integer({ min: -1e9, max: 1e9 }), { minLength: nodes, maxLength: nodes }),
    dropWriteP: fc.double({ min: 0, max: 0.3, noNaN: true }),
    loseAckP: fc.double({ min: 0, max: 0.2, noNaN: true }),
    pauses: fc.array(
      fc.tuple(
        fc.integer({ min: 0, max: nodes - 1 }),
        fc.integer({ min: 0, max: 50_000 }),
        fc.oneof(fc.integer({ min: 100, max: 8_000 }), fc.constant(Number.POSITIVE_INFINITY)),
      ),
      { maxLength: 4 },
    ),
    durationMs: fc.constant(60_000),
  }),
);

describe("leader lease under interleavings", () => {
  it("never two leaders whose leases overlap; epochs strictly increase; someone leads", () => {
    fc.assert(
      fc.property(scenario, (o) => {
        const r = runLeaseSim(o);
        expect(r.overlaps).toEqual([]);
        for (let i = 1; i < r.epochs.length; i++) expect(r.epochs[i]!).toBeGreaterThan(r.epochs[i - 1]!);
        // Not vacuous: unless a node crashes, someone wins (a takeover fails with p ≤ 0.44, retried every lease for 60 s).
        if (o.pauses.every(([, , d]) => Number.isFinite(d))) expect(r.epochs.length).toBeGreaterThan(0);
      }),
      { numRuns: 200 },
    );
  });

  it("the simulation can see an overlap: with no margin against 30 % drift it finds one", () => {
    // Guards the checker itself: the same model with a clock running 30 % slow on the leader overlaps.
    let found = 0;
    for (let seed = 1; seed <= 40 && found === 0; seed++) {
      const r = runLeaseSim({
        seed,
        nodes: 2,
        driftRates: [-0.3, 0.3],
        clockOffsetsMs: [0, 0],
        dropWriteP: 0.5,
        loseAckP: 0,
        pauses: [],
        durationMs: 60_000,
      });
      found += r.overlaps.length;
    }
    expect(found).toBeGreaterThan(0);
  });
});

describe("leader lease, a found interleaving kept as an example", () => {
  it("a leader paused right after a renewal, on a clock 5 % slow, is not leader when the follower on a 5 % fast clock takes over", () => {
    // Found by a probe with the margin taken out of isLeaderAt (2 hits in 3 000 seeds): the tick-driven
    // step-down never runs during the pause, so only the clock check keeps the woken leader from acting.
    const r = runLeaseSim({
      seed: 257,
      nodes: 2,
      driftRates: [-0.05, 0.05],
      clockOffsetsMs: [0, 0],
      dropWriteP: 0.1,
      loseAckP: 0.1,
      pauses: [
        [0, (257 * 7919) % 50_000, 3_000 + (257 % 5) * 500],
        [1, (257 * 104_729) % 50_000, 3_000 + (257 % 7) * 400],
      ],
      durationMs: 60_000,
    });
    expect(r.overlaps).toEqual([]);
    expect(r.epochs.length).toBeGreaterThan(1);
  });
});
