import { Code, WardenError } from "@warden/common";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { FakeBackend } from "./fake-ports.js";
import type { LoaderEvent } from "./loader-event.js";
import type { Lease } from "./loader-types.js";
import { replicaHarness } from "./replica-test-kit.js";
import type { Harness } from "./test-fakes.js";

type Op =
  | { readonly t: "calls"; readonly n: number }
  | { readonly t: "complete"; readonly i: number }
  | { readonly t: "stop"; readonly i: number; readonly fail: boolean; readonly force: boolean }
  | { readonly t: "reach"; readonly node: "n1" | "n2"; readonly reachable: boolean }
  | { readonly t: "place"; readonly node: "n1" | "n2" }
  | { readonly t: "time"; readonly ms: number }
  | { readonly t: "scale"; readonly min: number; readonly maxUp: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ t: fc.constant("calls" as const), n: fc.integer({ min: 1, max: 6 }) }),
  fc.record({ t: fc.constant("complete" as const), i: fc.nat(40) }),
  fc.record({ t: fc.constant("stop" as const), i: fc.nat(5), fail: fc.boolean(), force: fc.boolean() }),
  fc.record({ t: fc.constant("reach" as const), node: fc.constantFrom("n1" as const, "n2" as const), reachable: fc.boolean() }),
  fc.record({ t: fc.constant("place" as const), node: fc.constantFrom("n1" as const, "n2" as const) }),
  fc.record({ t: fc.constant("time" as const), ms: fc.integer({ min: 100, max: 5_000 }) }),
  fc.record({ t: fc.constant("scale" as const), min: fc.nat(3), maxUp: fc.nat(1) }),
);

/** Live replicas of m1 (admitted, loading or ready, not stopping): what counts toward max. */
function live(h: Harness): number {
  return h.loader.core.instancesOfModel("m1").filter((v) => v.pendingEviction === undefined && v.state !== "freed").length;
}

function readyNotPending(h: Harness): number {
  return h.loader.core.instancesOfModel("m1").filter((v) => v.pendingEviction === undefined && v.state === "ready").length;
}

/** Wires the checks that must hold at the moment of each decision. */
function watch(h: Harness, violations: string[]): void {
  const core = h.loader.core;
  const track = core.trackRequest.bind(core);
  core.trackRequest = (address) => {
    const v = core.instanceAt(address);
    const held = v === undefined ? undefined : h.loader.heldInstance(v.incarnation);
    if (v === undefined || v.state !== "ready" || v.pendingEviction !== undefined || held?.phase !== "ready" || h.directory.unreachable.has(v.nodeId)) {
      violations.push(`routed to ${address}: ${JSON.stringify(v?.state)} pending=${String(v?.pendingEviction !== undefined)}`);
    }
    return track(address);
  };
  const check = (e: LoaderEvent): void => {
    const r = h.loader.modelSpec("m1")?.replicas;
    if (r === undefined || e.model !== "m1") return;
    if (e.type === "replica.scaled-up" && e.replicas > r.max) violations.push(`scaled up to ${String(e.replicas)} > max ${String(r.max)}`);
    // The victim is already pending: what is left must not be below the floor.
    if (e.type === "eviction.started" && e.reason === "idle" && readyNotPending(h) < r.min) violations.push(`idle eviction below min ${String(r.min)}`);
    if (e.type === "eviction.started" && e.reason === "scale-down" && readyNotPending(h) < Math.max(1, r.min)) violations.push("scale-down below the floor");
  };
  const emit = h.events.emit.bind(h.events);
  h.events.emit = (e) => {
    check(e);
    emit(e);
  };
  const durable = h.events.emitDurable.bind(h.events);
  h.events.emitDurable = (e) => {
    check(e);
    return durable(e);
  };
}

async function runOps(ops: readonly Op[]): Promise<string[]> {
  const h = replicaHarness({ min: 1, max: 2, targetInFlight: 1, scaleDownAfterMs: 2_000 }, { policy: { idleCheck: true, idleTimeoutMs: 1_500 }, enforcement: { maxAttempts: 2, intervalMs: 100 } });
  const violations: string[] = [];
  watch(h, violations);
  h.loader.startTicking();
  const leases: Lease<FakeBackend>[] = [];
  for (const o of ops) {
    switch (o.t) {
      case "calls":
        for (let i = 0; i < o.n; i++) {
          const ac = new AbortController();
          const p = h.loader.acquire("m1", ac.signal).then(
            (l) => void leases.push(l),
            (err: unknown) => {
              const e = WardenError.from(err);
              if (e.code !== Code.Unavailable && e.code !== Code.Canceled && e.code !== Code.ResourceExhausted && e.code !== Code.FailedPrecondition) violations.push(`call failed: ${e.message}`);
            },
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
      case "reach":
        if (o.reachable) h.directory.unreachable.delete(o.node);
        else h.directory.unreachable.add(o.node);
        break;
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
    const r = h.loader.modelSpec("m1")?.replicas;
    if (r !== undefined && live(h) > r.max) violations.push(`live ${String(live(h))} > max ${String(r.max)} after ${o.t}`);
    if (violations.length > 0) break;
  }
  for (const l of leases) l.complete();
  h.loader.close();
  return violations;
}

describe("replica properties (fast-check)", () => {
  it("routing never picks a non-ready replica; the count never exceeds max nor goes below min but by a logged eviction", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 5, maxLength: 25 }), async (ops) => {
        expect(await runOps(ops)).toEqual([]);
      }),
      { numRuns: 40, seed: 16 },
    );
  });
});
