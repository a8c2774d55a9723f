import { WardenError, Code } from "@warden/common";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { FakeBackend } from "./fake-ports.js";
import type { Lease } from "./loader-types.js";
import { createHarness, type Harness } from "./test-fakes.js";

// The per-node indexes a heartbeat reads (heldOn, leftoversOn) against a full
// scan of the held table and the leftovers, after every step of random
// sequences that go through each transition point: loads that succeed, fail
// or are abandoned, adoption, stops that succeed or fail (registered again or
// leftover), reported exits, lost nodes, operators' forgets, unloads, time.

type Node = "n1" | "n2";
type Op =
  | { readonly t: "load"; readonly model: string; readonly node: Node; readonly outcome: "ready" | "failed" | "hang" }
  | { readonly t: "adopt"; readonly model: string; readonly node: Node; readonly id: number }
  | { readonly t: "stop"; readonly i: number; readonly answer: "stopped" | "error" }
  | { readonly t: "gone"; readonly i: number }
  | { readonly t: "lost"; readonly node: Node }
  | { readonly t: "forget"; readonly i: number }
  | { readonly t: "unload"; readonly model: string }
  | { readonly t: "time"; readonly ms: number };

const model = fc.constantFrom("m1", "m2", "m3", "m4");
const node = fc.constantFrom<Node>("n1", "n2");
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ t: fc.constant("load" as const), model, node, outcome: fc.constantFrom("ready" as const, "failed" as const, "hang" as const) }),
  fc.record({ t: fc.constant("adopt" as const), model, node, id: fc.nat(20) }),
  fc.record({ t: fc.constant("stop" as const), i: fc.nat(10), answer: fc.constantFrom("stopped" as const, "error" as const) }),
  fc.record({ t: fc.constant("gone" as const), i: fc.nat(10) }),
  fc.record({ t: fc.constant("lost" as const), node }),
  fc.record({ t: fc.constant("forget" as const), i: fc.nat(10) }),
  fc.record({ t: fc.constant("unload" as const), model }),
  fc.record({ t: fc.constant("time" as const), ms: fc.integer({ min: 100, max: 20_000 }) }),
);

/** Every node the index or a scan mentions. */
function nodesOf(h: Harness): Set<string> {
  return new Set(["n1", "n2", ...h.loader.heldInstances().map((x) => x.nodeId), ...h.loader.leftoverList().map((l) => l.nodeId)]);
}

function checkIndexes(h: Harness, step: string): void {
  for (const n of nodesOf(h)) {
    const scanHeld = h.loader.heldInstances().filter((x) => x.nodeId === n);
    expect(h.loader.heldOn(n), `${step}: held on ${n}`).toEqual(scanHeld);
    const scanLeft = h.loader.leftoverList().filter((l) => l.nodeId === n).map((l) => l.incarnation).sort();
    expect(h.loader.leftoversOn(n).map((l) => l.incarnation).sort(), `${step}: leftovers on ${n}`).toEqual(scanLeft);
  }
}

function pick<T>(xs: readonly T[], i: number): T | undefined {
  return xs.length === 0 ? undefined : xs[i % xs.length];
}

async function apply(h: Harness, o: Op, leases: Lease<FakeBackend>[]): Promise<void> {
  switch (o.t) {
    case "load": {
      h.placement.route.set(o.model, o.node);
      const agent = o.node === "n1" ? h.n1 : h.n2;
      agent.startScript = (s) => {
        if (o.outcome === "ready") s.spawned().ready();
        else if (o.outcome === "failed") s.spawned().failed("boom");
        else s.spawned(); // never ready: abandoned at its deadline
      };
      const t = h.track(h.loader.acquire(o.model, h.never));
      await h.flush();
      if (t.done()) {
        try {
          leases.push(t.value());
        } catch {
          // refused or failed: nothing held for it
        }
      }
      return;
    }
    case "adopt": {
      const spec = h.loader.modelSpec(o.model);
      if (spec !== undefined) h.loader.adoptRemoteOnly(spec, o.node, `${o.node}:${String(9000 + o.id)}`, `adopted-${String(o.id)}`);
      return;
    }
    case "stop": {
      const x = pick(h.loader.heldInstances(), o.i);
      if (x === undefined) return;
      for (const a of [h.n1, h.n2]) a.stopScript = () => (o.answer === "stopped" ? { t: "stopped" } : new WardenError(Code.Unavailable, "stop failed"));
      void h.loader.watchdog.stop(x.incarnation, { reason: "admin", force: true }).catch(() => undefined);
      return;
    }
    case "gone": {
      const x = pick([...h.loader.heldInstances().map((y) => y.incarnation), ...h.loader.leftoverList().map((l) => l.incarnation)], o.i);
      if (x !== undefined) h.loader.onBackendGone(x, { exitCode: 0, signal: "", intentional: false, lastStderrLine: "" });
      return;
    }
    case "lost":
      h.loader.onNodeLost(o.node);
      return;
    case "forget": {
      const x = pick([...h.loader.heldInstances().map((y) => y.incarnation), ...h.loader.leftoverList().map((l) => l.incarnation)], o.i);
      if (x !== undefined) h.loader.forget(x, "op", "");
      return;
    }
    case "unload":
      void h.loader.unload(o.model, { force: true, stopTimeoutMs: 5_000 }).catch(() => undefined);
      return;
    case "time":
      for (const l of leases.splice(0)) l.complete();
      await h.run(o.ms);
      return;
  }
}

describe("the loader's per-node indexes of held instances and leftovers", () => {
  it("always equal a full scan, after any sequence of loads, adoptions, stops, exits, lost nodes, forgets and unloads", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 30 }), async (ops) => {
        const h = createHarness({ enforcement: { maxAttempts: 2, intervalMs: 100 }, stop: { stopTimeoutMs: 2_000, stopRpcTimeoutMs: 1_000 } });
        const leases: Lease<FakeBackend>[] = [];
        try {
          for (const [i, o] of ops.entries()) {
            await apply(h, o, leases);
            await h.flush();
            checkIndexes(h, `step ${String(i)} ${o.t}`);
          }
          for (const l of leases) l.complete();
          await h.run(60_000);
          checkIndexes(h, "end");
        } finally {
          h.loader.close();
        }
      }),
      { numRuns: 60 },
    );
  });
});

describe("HeldNodeIndex.stamp", () => {
  it("is 0 while a node holds nothing, fresh on every add and remove, and never repeats for another set", async () => {
    const { HeldNodeIndex } = await import("./held-node-index.js");
    const idx = new HeldNodeIndex();
    const h = (incarnation: string, nodeId = "n1") => ({ incarnation, nodeId }) as unknown as Parameters<typeof idx.add>[0];
    expect(idx.stamp("n1")).toBe(0);
    const x = h("X");
    idx.add(x);
    const one = idx.stamp("n1");
    idx.add(h("Y", "n2")); // another node's change leaves n1's stamp
    expect(idx.stamp("n1")).toBe(one);
    const y = h("Y");
    idx.add(y);
    idx.remove(x);
    const swapped = idx.stamp("n1"); // same size as at `one`, another set
    expect(new Set([0, one, swapped]).size).toBe(3);
    idx.remove(x); // not held: nothing changes
    expect(idx.stamp("n1")).toBe(swapped);
    idx.remove(y);
    expect(idx.stamp("n1")).toBe(0);
  });
});
