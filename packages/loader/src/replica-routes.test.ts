import { describe, expect, it } from "vitest";
import fc from "fast-check";
import type { FakeBackend } from "./fake-ports.js";
import type { LoaderState } from "./loader-state.js";
import type { Lease } from "./loader-types.js";
import { replicaHarness, replicaModels } from "./replica-test-kit.js";
import { chooseReplica, pickReplica } from "./replica-routing.js";

type Op =
  | { t: "acquire" }
  | { t: "complete"; i: number }
  | { t: "advance"; ms: number }
  | { t: "touch" }
  | { t: "reachable"; node: "n1" | "n2"; up: boolean }
  | { t: "adopt"; node: "n1" | "n2" }
  | { t: "gone"; i: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  { arbitrary: fc.constant({ t: "acquire" as const }), weight: 5 },
  { arbitrary: fc.nat(40).map((i) => ({ t: "complete" as const, i })), weight: 4 },
  { arbitrary: fc.constantFrom(0, 1, 5).map((ms) => ({ t: "advance" as const, ms })), weight: 2 },
  { arbitrary: fc.constant({ t: "touch" as const }), weight: 1 },
  { arbitrary: fc.record({ node: fc.constantFrom("n1" as const, "n2" as const), up: fc.boolean() }).map((r) => ({ t: "reachable" as const, ...r })), weight: 1 },
  { arbitrary: fc.constantFrom("n1" as const, "n2" as const).map((node) => ({ t: "adopt" as const, node })), weight: 1 },
  { arbitrary: fc.nat(20).map((i) => ({ t: "gone" as const, i })), weight: 1 },
);

describe("replica routing order (replica-routes.ts)", () => {
  it("fast-check: the indexed pick is always the full scan's choice (fewest in flight, least recently used, oldest), and calls go there", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 60 }), async (ops) => {
        const h = replicaHarness({ min: 0, max: 64, targetInFlight: 1_000 });
        const s = (h.loader as unknown as { readonly s: LoaderState<FakeBackend> }).s;
        const spec = replicaModels({ min: 0, max: 64, targetInFlight: 1_000 }).find((m) => m.id === "m1");
        if (spec === undefined) throw new Error("m1 expected");
        let next = 0;
        const adopt = (node: string): void => {
          next++;
          expect(h.loader.adoptRemoteOnly(spec, node, `10.0.0.${String(next)}:5000`, `adopted-${String(next)}`)).toBe(true);
        };
        for (let i = 0; i < 3; i++) adopt(i % 2 === 0 ? "n1" : "n2");
        const leases: Lease<FakeBackend>[] = [];
        const agree = (): void => {
          const full = chooseReplica(s, "m1");
          const fast = pickReplica(s, "m1");
          expect(fast?.best.incarnation).toBe(full.best?.incarnation);
          if (fast !== undefined) expect(fast.inFlight).toBe(full.bestInFlight);
        };
        for (const o of ops) {
          agree();
          switch (o.t) {
            case "acquire": {
              const expected = chooseReplica(s, "m1").best?.incarnation;
              if (expected === undefined) break; // nothing routable: the call would wait for a load
              const lease = await h.loader.acquire("m1", h.never);
              expect(lease.incarnation).toBe(expected);
              leases.push(lease);
              break;
            }
            case "complete": {
              const lease = leases[o.i % Math.max(1, leases.length)];
              lease?.complete();
              lease?.complete(); // idempotent
              if (lease !== undefined) leases.splice(leases.indexOf(lease), 1);
              break;
            }
            case "advance":
              h.clock.advance(o.ms);
              break;
            case "touch":
              if (chooseReplica(s, "m1").best !== undefined) await h.loader.ensureLoaded("m1", h.never);
              break;
            case "reachable":
              if (o.up) h.directory.unreachable.delete(o.node);
              else h.directory.unreachable.add(o.node);
              break;
            case "adopt":
              adopt(o.node);
              break;
            case "gone": {
              const held = [...s.replicas.of("m1")];
              const inc = held[o.i % Math.max(1, held.length)];
              if (inc !== undefined && held.length > 1) h.loader.onBackendGone(inc, { exitCode: 1, signal: "", intentional: false, lastStderrLine: "bench" });
              await h.flush();
              break;
            }
          }
        }
        agree();
        for (const l of leases) l.complete();
        agree();
        h.loader.close();
      }),
      { numRuns: 150 },
    );
  });

  it("100 ready replicas: a pick visits the head of the order, not every replica", async () => {
    const h = replicaHarness({ min: 0, max: 100, targetInFlight: 1_000 });
    const s = (h.loader as unknown as { readonly s: LoaderState<FakeBackend> }).s;
    const spec = replicaModels({ min: 0, max: 100, targetInFlight: 1_000 }).find((m) => m.id === "m1");
    if (spec === undefined) throw new Error("m1 expected");
    for (let i = 0; i < 100; i++) h.loader.adoptRemoteOnly(spec, i % 2 === 0 ? "n1" : "n2", `10.0.1.${String(i)}:5000`, `r-${String(i)}`);
    pickReplica(s, "m1"); // builds the order once
    let visited = 0;
    const leases: Lease<FakeBackend>[] = [];
    for (let i = 0; i < 150; i++) {
      visited = 0;
      const picked = s.routes.pick("m1", () => {
        visited++;
        return true;
      });
      expect(picked?.best.incarnation).toBe(chooseReplica(s, "m1").best?.incarnation);
      expect(visited).toBeLessThanOrEqual(1);
      leases.push(await h.loader.acquire("m1", h.never));
    }
    // 150 calls over 100 replicas: fewest in flight first, so every replica has one or two.
    const per = new Map<string, number>();
    for (const l of leases) per.set(l.incarnation, (per.get(l.incarnation) ?? 0) + 1);
    expect([...per.values()].every((n) => n === 1 || n === 2)).toBe(true);
    expect(per.size).toBe(100);
    h.loader.close();
  });
});
