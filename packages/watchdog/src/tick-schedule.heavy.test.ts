import { ManualClock, isWardenError } from "@warden/common";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { ModelRule } from "./model-rules.js";
import type { PolicyPatch } from "./policy.js";
import type { Completion } from "./request-tracker.js";
import type { StopOutcome } from "./stop-command.js";
import { createWatchdogCore, type WatchdogCore } from "./watchdog-core.js";

// The due-only tick (tick-schedule.ts) against the tick that judges every
// address, on the same random operation sequences: two cores get the same
// calls, one ticks with `tick()`, the other with `tickFullScan()`, and every
// answer — each tick's stops, cleared addresses and pressure changes, each
// call's result or error, the final instances and request state — must be
// the same. The operations include every change that moves a timer: request
// begin/end, registration, ready, removal, stops and each settle row, pins,
// the timing policy and per-model rules (floors, idle timeouts), memory
// readings, forgotten nodes and the pressure threshold.

const nodes = ["n1", "n2"] as const;
const models = ["a", "b", "c"] as const;
const addresses = ["x0", "x1", "x2", "y0", "y1", "y2", "r0", "r1", "r2"] as const;

type Op =
  | { t: "register"; node: number; model: number; address: number; ready: boolean }
  | { t: "ready"; k: number }
  | { t: "remove"; k: number }
  | { t: "admit"; node: number; model: number }
  | { t: "begin"; address: number }
  | { t: "end"; k: number }
  | { t: "touch"; address: number }
  | { t: "settle"; k: number; outcome: number; holds: boolean }
  | { t: "advance"; ms: number }
  | { t: "tick" }
  | { t: "policy"; patch: PolicyPatch }
  | { t: "rules"; rules: [number, ModelRule][] }
  | { t: "explicit"; k: number }
  | { t: "memory"; node: number; usedPercent: number; gpu: boolean }
  | { t: "forgetNode"; node: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ t: fc.constant("register" as const), node: fc.nat(1), model: fc.nat(2), address: fc.nat(5), ready: fc.boolean() }) },
  // Replicas of one model on the addresses nothing else uses: replica floors need several ready instances of a model.
  { weight: 2, arbitrary: fc.record({ t: fc.constant("register" as const), node: fc.nat(1), model: fc.constant(0), address: fc.integer({ min: 6, max: 8 }), ready: fc.constant(true) }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant("ready" as const), k: fc.nat(40) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("remove" as const), k: fc.nat(40) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("admit" as const), node: fc.nat(1), model: fc.nat(2) }) },
  { weight: 4, arbitrary: fc.record({ t: fc.constant("begin" as const), address: fc.nat(8) }) },
  { weight: 4, arbitrary: fc.record({ t: fc.constant("end" as const), k: fc.nat(60) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("touch" as const), address: fc.nat(8) }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant("settle" as const), k: fc.nat(40), outcome: fc.nat(3), holds: fc.boolean() }) },
  { weight: 6, arbitrary: fc.record({ t: fc.constant("advance" as const), ms: fc.integer({ min: 0, max: 400 }) }) },
  { weight: 8, arbitrary: fc.constant({ t: "tick" as const }) },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant("policy" as const),
      patch: fc.record(
        {
          idleCheck: fc.boolean(),
          idleTimeoutMs: fc.integer({ min: 1, max: 600 }),
          busyCheck: fc.boolean(),
          busyTimeoutMs: fc.integer({ min: 1, max: 900 }),
          memoryReclaimer: fc.boolean(),
          memoryThreshold: fc.integer({ min: 60, max: 100 }).map((x) => x / 100),
          memoryReleaseHoldMs: fc.integer({ min: 0, max: 600 }),
          memoryReleaseWaitMs: fc.integer({ min: 0, max: 600 }),
        },
        { requiredKeys: [] },
      ),
    }),
  },
  // Pins alone (a timing change re-times everything, which would hide a pin change's own re-timing).
  { weight: 2, arbitrary: fc.record({ t: fc.constant("policy" as const), patch: fc.record({ pinnedModels: fc.subarray([...models]) }) }) },
  {
    weight: 2,
    arbitrary: fc.record({
      t: fc.constant("rules" as const),
      rules: fc.array(fc.tuple(fc.nat(2), fc.record({ minReplicas: fc.nat(2), idleTimeoutMs: fc.option(fc.integer({ min: 0, max: 500 }), { nil: undefined }) })), { maxLength: 3 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("explicit" as const), k: fc.nat(40) }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant("memory" as const), node: fc.nat(1), usedPercent: fc.integer({ min: 50, max: 100 }), gpu: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("forgetNode" as const), node: fc.nat(1) }) },
);

interface Side {
  readonly core: WatchdogCore;
  readonly completions: Completion[];
  readonly holds: Map<string, boolean>;
}

function side(clock: ManualClock, policy: PolicyPatch): Side {
  const holds = new Map<string, boolean>();
  const core = createWatchdogCore({ clock, loader: { hasModelAtAddress: (_m, _a, inc) => holds.get(inc) ?? true }, policy });
  return { core, completions: [], holds };
}

/** Runs one call and returns what it answered (or the error's code), as a string to compare. */
function answer(f: () => unknown): string {
  try {
    return JSON.stringify(f() ?? null);
  } catch (err) {
    if (isWardenError(err)) return `error ${String(err.code)}`;
    throw err;
  }
}

const outcomes: ((k: number) => StopOutcome)[] = [
  () => ({ t: "stopped" }),
  () => ({ t: "alreadyGone" }),
  () => ({ t: "failed", message: "stop failed", freed: false }),
  () => ({ t: "failed", message: "stop failed after free", freed: true }),
];

function apply(s: Side, op: Op, incs: string[], fullScan: boolean): string {
  const c = s.core;
  const inc = (k: number): string => incs[k % Math.max(1, incs.length)] ?? "none";
  switch (op.t) {
    case "register": {
      const incarnation = `i${String(incs.length)}`;
      incs.push(incarnation);
      const spec = { nodeId: nodes[op.node] ?? "n1", model: models[op.model] ?? "a", incarnation, address: addresses[op.address] ?? "x0" };
      return answer(() => (op.ready ? c.registerReady(spec) : c.registerLoading(spec)));
    }
    case "ready":
      return answer(() => c.markReady(inc(op.k)));
    case "remove":
      return answer(() => c.remove(inc(op.k)));
    case "admit": {
      const incarnation = `i${String(incs.length)}`;
      incs.push(incarnation);
      return answer(() => c.admit({ nodeId: nodes[op.node] ?? "n1", model: models[op.model] ?? "a", incarnation }));
    }
    case "begin":
      return answer(() => {
        s.completions.push(c.trackRequest(addresses[op.address % addresses.length] ?? "x0"));
        return s.completions.length;
      });
    case "end":
      s.completions[op.k % Math.max(1, s.completions.length)]?.();
      return "";
    case "touch":
      return answer(() => {
        c.updateLastUsed(addresses[op.address % addresses.length] ?? "x0");
      });
    case "settle": {
      const i = inc(op.k);
      s.holds.set(i, op.holds);
      return answer(() => c.settle(i, (outcomes[op.outcome] ?? outcomes[0])?.(op.k) ?? { t: "stopped" }));
    }
    case "advance":
      return "";
    case "tick":
      return answer(() => (fullScan ? c.tickFullScan() : c.tick()));
    case "policy":
      return answer(() => c.updatePolicy(op.patch));
    case "rules":
      return answer(() => {
        c.setModelRules(new Map(op.rules.map(([m, r]) => [models[m] ?? "a", r])));
      });
    case "explicit":
      return answer(() => c.selectExplicit(inc(op.k), { reason: "admin", force: true }));
    case "memory": {
      const device = { totalBytes: 100, usedBytes: op.usedPercent };
      return answer(() => c.reportMemory(nodes[op.node] ?? "n1", op.gpu ? { gpus: [{ index: 0, ...device }] } : { gpus: [], ram: device }));
    }
    case "forgetNode":
      return answer(() => {
        c.forgetNode(nodes[op.node] ?? "n1");
      });
  }
}

describe("due-only tick", () => {
  it("decides exactly what the tick judging every address decides, on random operation sequences", () => {
    fc.assert(
      fc.property(fc.array(opArb, { minLength: 1, maxLength: 150 }), fc.boolean(), (ops, idleCheck) => {
        const clock = new ManualClock(0);
        const policy: PolicyPatch = { idleCheck, idleTimeoutMs: 300, busyCheck: true, busyTimeoutMs: 500, limitPerNode: 3, memoryReclaimer: true, memoryReleaseHoldMs: 300, memoryReleaseWaitMs: 200 };
        const due = side(clock, policy);
        const full = side(clock, policy);
        const incsDue: string[] = [];
        const incsFull: string[] = [];
        for (const [i, op] of ops.entries()) {
          if (op.t === "advance") clock.advance(op.ms);
          const a = apply(due, op, incsDue, false);
          const b = apply(full, op, incsFull, true);
          expect(a, `op ${String(i)} ${JSON.stringify(op)}`).toBe(b);
        }
        // A last tick well past every timer, then everything they hold.
        clock.advance(2_000);
        expect(answer(() => due.core.tick())).toBe(answer(() => full.core.tickFullScan()));
        expect(JSON.stringify(due.core.snapshot())).toBe(JSON.stringify(full.core.snapshot()));
      }),
      { numRuns: 1000 },
    );
  });
});
