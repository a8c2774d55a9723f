import { Code, WardenError } from "@warden/common";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { FakeBackend } from "./fake-ports.js";
import type { Lease } from "./loader-types.js";
import { replicaHarness } from "./replica-test-kit.js";

// The replica reconciler's change-driven pass (replica-work.ts) against the
// pass over every model, on the same random operation sequences: two loaders
// get the same calls, completions, stops (failing or not), node moves,
// scale changes and time; everything each did — every agent call, journal
// write and event, in order — must be the same.

type Op =
  | { readonly t: "calls"; readonly n: number }
  | { readonly t: "complete"; readonly i: number }
  | { readonly t: "stop"; readonly i: number; readonly fail: boolean; readonly force: boolean }
  | { readonly t: "place"; readonly node: "n1" | "n2" }
  | { readonly t: "time"; readonly ms: number }
  | { readonly t: "scale"; readonly min: number; readonly maxUp: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ t: fc.constant("calls" as const), n: fc.integer({ min: 1, max: 6 }) }),
  fc.record({ t: fc.constant("complete" as const), i: fc.nat(40) }),
  fc.record({ t: fc.constant("stop" as const), i: fc.nat(5), fail: fc.boolean(), force: fc.boolean() }),
  fc.record({ t: fc.constant("place" as const), node: fc.constantFrom("n1" as const, "n2" as const) }),
  fc.record({ t: fc.constant("time" as const), ms: fc.integer({ min: 100, max: 5_000 }) }),
  fc.record({ t: fc.constant("scale" as const), min: fc.nat(3), maxUp: fc.nat(1) }),
);

async function runOps(ops: readonly Op[], replicaPass: "changed" | "every"): Promise<string[]> {
  const h = replicaHarness({ min: 1, max: 2, targetInFlight: 1, scaleDownAfterMs: 2_000 }, { policy: { idleCheck: true, idleTimeoutMs: 6_000 }, enforcement: { maxAttempts: 2, intervalMs: 100 }, replicaPass });
  // Every event with the time it was emitted at: the same decisions must come at the same times.
  const timed: string[] = [];
  const emit = h.events.emit.bind(h.events);
  h.events.emit = (e) => {
    timed.push(`${String(h.clock.now())} ${JSON.stringify(e)}`);
    emit(e);
  };
  const durable = h.events.emitDurable.bind(h.events);
  h.events.emitDurable = (e) => {
    timed.push(`${String(h.clock.now())} ${JSON.stringify(e)}`);
    return durable(e);
  };
  h.loader.startTicking();
  const leases: Lease<FakeBackend>[] = [];
  for (const o of ops) {
    switch (o.t) {
      case "calls":
        for (let i = 0; i < o.n; i++) {
          const ac = new AbortController();
          const p = h.loader.acquire("m1", ac.signal).then(
            (l) => void leases.push(l),
            (err: unknown) => void h.log.push(`call failed: ${WardenError.from(err).code}`),
          );
          await h.run(200);
          ac.abort(new WardenError(Code.Canceled, "test gave up"));
          await p;
        }
        break;
      case "complete":
        leases.splice(o.i % Math.max(1, leases.length), 1)[0]?.complete();
        break;
      case "stop": {
        const incs = h.loader.core.instancesOfModel("m1").map((v) => v.incarnation);
        const inc = incs[o.i % Math.max(1, incs.length)];
        if (inc === undefined) break;
        for (const a of [h.n1, h.n2]) {
          a.stopScript = o.fail ? () => new WardenError(Code.Unavailable, "agent hiccup") : () => ({ t: "stopped" });
          a.isRunningAnswer = o.fail ? () => true : undefined;
        }
        void h.loader.stopInstance(inc, { force: o.force, stopTimeoutMs: 1_000 }).catch(() => undefined);
        await h.run(100);
        break;
      }
      case "place":
        h.placement.defaultNode = o.node;
        break;
      case "time":
        await h.run(o.ms);
        break;
      case "scale": {
        const max = (h.loader.modelSpec("m1")?.replicas.max ?? 1) + o.maxUp;
        h.loader.scale("m1", { min: Math.min(o.min, max), max }, "prop");
        break;
      }
    }
  }
  await h.run(10_000);
  for (const l of leases) l.complete();
  await h.run(10_000);
  h.loader.close();
  return [...h.log, ...timed];
}

describe("replica reconciler: change-driven pass", () => {
  it("does exactly what the pass over every model does, on random operation sequences", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 5, maxLength: 25 }), async (ops) => {
        expect(await runOps(ops, "changed")).toEqual(await runOps(ops, "every"));
      }),
      { numRuns: 60 },
    );
  });
});
