import { Code, WardenError } from "@warden/common";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { FakeBackend, FakeStart } from "./test-fakes.js";
import type { LoaderState } from "./loader-state.js";
import type { Lease } from "./loader-types.js";
import type { BackendHandle } from "./ports.js";
import { createWatchdogCore } from "@warden/watchdog";
import type { HeldInstance } from "./loader-types.js";
import { setPhase } from "./loader-state.js";
import { modelSpec } from "./model-spec.js";
import { ReplicaCountCache, countReplicas } from "./replica-counts.js";
import { ReplicaIndex } from "./replica-index.js";
import type { ReplicaStatus } from "./replica-status.js";
import { replicaHarness, replicaModels, twoReplicas } from "./replica-test-kit.js";
import type { Harness } from "./test-fakes.js";

const stateOf = (h: Harness): LoaderState<FakeBackend> => (h.loader as unknown as { readonly s: LoaderState<FakeBackend> }).s;

/**
 * The counts as replicaStatusOf computed them before the cache (every
 * replica walked on every call): the reference the cached path must equal.
 */
function uncounted<H extends BackendHandle>(s: LoaderState<H>, model: string): Pick<ReplicaStatus, "ready" | "loading" | "stopping" | "desired"> {
  let ready = 0;
  let loading = 0;
  let stopping = 0;
  for (const v of s.core.instancesOfModel(model)) {
    if (v.pendingEviction !== undefined || v.state === "freed") stopping++;
    else if (v.state === "ready" && s.held.get(v.incarnation)?.phase === "ready") ready++;
    else loading++;
  }
  for (const inc of s.replicas.of(model)) if (s.core.instance(inc) === undefined) loading++;
  const admitting = s.loadIncarnations.get(model);
  if (admitting !== undefined && s.core.instance(admitting) === undefined && !s.held.has(admitting)) loading++;
  const { min, max } = s.models.get(model)?.replicas ?? { min: 0, max: 0 };
  return { ready, loading, stopping, desired: Math.min(max, Math.max(min, ready + loading)) };
}

/** Every configured model's statuses (cached path) against the uncached reference; the differences, named. */
function differences(h: Harness, when: string): string[] {
  const s = stateOf(h);
  const out: string[] = [];
  for (const st of h.loader.replicaStatuses()) {
    const got = { ready: st.ready, loading: st.loading, stopping: st.stopping, desired: st.desired };
    const want = uncounted(s, st.model);
    if (JSON.stringify(got) !== JSON.stringify(want)) out.push(`${when}: ${st.model} cached ${JSON.stringify(got)}, walked ${JSON.stringify(want)}`);
    const plain = countReplicas(s, st.model);
    if (plain.ready !== st.ready || plain.stopping !== st.stopping) out.push(`${when}: ${st.model} countReplicas ${JSON.stringify(plain)} differs`);
  }
  return out;
}

type Op =
  | { readonly t: "calls"; readonly n: number }
  | { readonly t: "complete"; readonly i: number }
  | { readonly t: "stop"; readonly i: number; readonly fail: boolean; readonly force: boolean }
  | { readonly t: "reach"; readonly node: "n1" | "n2"; readonly reachable: boolean }
  | { readonly t: "place"; readonly node: "n1" | "n2" }
  | { readonly t: "starts"; readonly how: "instant" | "held" | "unspawned" | "fail" | "failEarly" }
  | { readonly t: "finish"; readonly fail: boolean }
  | { readonly t: "lost"; readonly node: "n1" | "n2" }
  | { readonly t: "reload"; readonly rev: number }
  | { readonly t: "time"; readonly ms: number }
  | { readonly t: "scale"; readonly min: number; readonly maxUp: number };

const node = fc.constantFrom("n1" as const, "n2" as const);
// Weighted toward what moves replicas (starts, loads finishing or failing, time for the reconciler's ticks).
const op: fc.Arbitrary<Op> = fc.oneof(
  { arbitrary: fc.record({ t: fc.constant("calls" as const), n: fc.integer({ min: 1, max: 4 }) }), weight: 2 },
  { arbitrary: fc.record({ t: fc.constant("complete" as const), i: fc.nat(40) }), weight: 1 },
  { arbitrary: fc.record({ t: fc.constant("stop" as const), i: fc.nat(5), fail: fc.boolean(), force: fc.boolean() }), weight: 2 },
  { arbitrary: fc.record({ t: fc.constant("reach" as const), node, reachable: fc.boolean() }), weight: 1 },
  { arbitrary: fc.record({ t: fc.constant("place" as const), node }), weight: 1 },
  { arbitrary: fc.record({ t: fc.constant("starts" as const), how: fc.constantFrom("instant" as const, "held" as const, "unspawned" as const, "fail" as const, "failEarly" as const) }), weight: 3 },
  { arbitrary: fc.record({ t: fc.constant("finish" as const), fail: fc.boolean() }), weight: 3 },
  { arbitrary: fc.record({ t: fc.constant("lost" as const), node }), weight: 1 },
  { arbitrary: fc.record({ t: fc.constant("reload" as const), rev: fc.nat(2) }), weight: 1 },
  { arbitrary: fc.record({ t: fc.constant("time" as const), ms: fc.integer({ min: 100, max: 5_000 }) }), weight: 4 },
  { arbitrary: fc.record({ t: fc.constant("scale" as const), min: fc.nat(3), maxUp: fc.nat(1) }), weight: 2 },
);

/** Runs `ops` on a loader with m1 at 1…2 replicas, comparing cached and walked counts at every event and after every op. */
async function runOps(ops: readonly Op[]): Promise<string[]> {
  const h = replicaHarness({ min: 1, max: 2, targetInFlight: 1, scaleDownAfterMs: 2_000 }, { policy: { idleCheck: true, idleTimeoutMs: 1_500 }, enforcement: { maxAttempts: 2, intervalMs: 100 } });
  const found: string[] = [];
  // Read at every event too: a change that forgot to move a version shows as a stale count at the next read.
  const emit = h.events.emit.bind(h.events);
  h.events.emit = (e) => {
    emit(e);
    found.push(...differences(h, `at ${e.type}`));
  };
  h.loader.startTicking();
  const leases: Lease<FakeBackend>[] = [];
  const heldStarts: FakeStart[] = [];
  for (const o of ops) {
    switch (o.t) {
      case "calls":
        for (let i = 0; i < o.n; i++) {
          const ac = new AbortController();
          const p = h.loader.acquire("m1", ac.signal).then(
            (l) => void leases.push(l),
            () => undefined,
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
      case "starts":
        for (const a of [h.n1, h.n2]) {
          a.startScript = (s) => {
            // Held: spawned (in the watchdog, loading); unspawned: still starting (held only); failEarly: fails before its spawn.
            if (o.how === "instant") s.spawned().ready();
            else if (o.how === "fail") s.spawned().failed("out of memory");
            else if (o.how === "failEarly") s.failed("no such file");
            else {
              if (o.how === "held") s.spawned();
              heldStarts.push(s);
            }
          };
        }
        break;
      case "finish":
        for (const s of heldStarts.splice(0)) {
          const spawned = s.sent.some((e) => e.t === "spawned");
          if (o.fail) s.failed("crashed while loading");
          else if (spawned) s.ready();
          else s.spawned().ready();
        }
        await h.run(50);
        break;
      case "lost":
        h.loader.onNodeLost(o.node);
        break;
      case "reload":
        await Promise.all(h.loader.setModels(replicaModels({ min: 1, max: 2, targetInFlight: 1, scaleDownAfterMs: 2_000 }, { options: [`rev:${String(o.rev)}`] })));
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
    found.push(...differences(h, `after ${o.t}`));
    if (found.length > 0) break;
  }
  for (const l of leases) l.complete();
  h.loader.close();
  return found;
}

describe("cached replica counts (fast-check)", () => {
  it("equal the counts walked over every replica, at every event and after every step (loads, ready, stops, leftovers, lost nodes, reloads, scale)", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 10, maxLength: 40 }), async (ops) => {
        expect(await runOps(ops)).toEqual([]);
      }),
      { numRuns: 100, seed: 43 },
    );
  }, 120_000);
});

describe("a replica status read before a change shows the change after it", () => {
  const status = (h: Harness): ReplicaStatus => {
    const st = h.loader.replicaStatus("m1");
    if (st === undefined) throw new Error("m1 is configured");
    return st;
  };

  it("load, ready and stop: loading, then ready, then stopping and gone", async () => {
    const h = replicaHarness({ min: 0, max: 2, targetInFlight: 1 });
    let pending: FakeStart | undefined;
    h.n1.startScript = (s) => {
      pending = s;
    };
    expect(status(h)).toMatchObject({ ready: 0, loading: 0, stopping: 0 });
    const call = h.track(h.loader.acquire("m1", h.never));
    await h.flush();
    expect(status(h)).toMatchObject({ ready: 0, loading: 1 }); // admitting or starting
    pending?.spawned();
    await h.flush();
    expect(status(h)).toMatchObject({ ready: 0, loading: 1 }); // held loading, in the watchdog
    pending?.ready();
    await h.until(() => call.done());
    expect(status(h)).toMatchObject({ ready: 1, loading: 0 });
    call.value().complete();
    const inc = call.value().incarnation;
    let during: ReplicaStatus | undefined;
    h.n1.duringStop = () => {
      during = status(h);
    };
    await h.loader.stopInstance(inc, { force: false, stopTimeoutMs: 1_000 });
    expect(during).toMatchObject({ ready: 0, stopping: 1 });
    expect(status(h)).toMatchObject({ ready: 0, loading: 0, stopping: 0 });
    h.loader.close();
  });

  it("a failed stop: the replica leaves the counts and shows as a leftover", async () => {
    const h = replicaHarness({ min: 0, max: 2, targetInFlight: 1 });
    const [, onN2] = await twoReplicas(h);
    expect(status(h)).toMatchObject({ ready: 2, leftovers: 0 });
    // A remote StopBackend that fails leaves a leftover (the local half is dropped first).
    h.n2.stopScript = () => new WardenError(Code.Unavailable, "connection refused");
    expect((await h.loader.stopInstance(onN2, { force: true, stopTimeoutMs: 1_000 })).t).toBe("leftover");
    expect(status(h)).toMatchObject({ ready: 1, loading: 0, stopping: 0, leftovers: 1 });
    h.loader.close();
  });

  it("the breaker: a failing scale-up shows as blocked once it opens", async () => {
    const h = replicaHarness({ min: 1, max: 1, targetInFlight: 1 });
    expect(status(h).blocked).toBeUndefined();
    h.n1.startScript = (s) => void s.spawned().failed("out of memory");
    h.loader.startTicking();
    await h.until(() => h.events.ofType("replica.scale-blocked").length > 0);
    expect(status(h).blocked?.error).toContain("out of memory");
    expect(status(h)).toMatchObject({ ready: 0, loading: 0 });
    h.loader.close();
  });

  it("a rollout: counts its stale and current replicas as the replacements come up", async () => {
    const h = replicaHarness({ min: 0, max: 2, targetInFlight: 1 });
    await twoReplicas(h);
    expect(status(h).rollout).toBeUndefined();
    h.loader.startTicking();
    await Promise.all(h.loader.setModels(replicaModels({ min: 0, max: 2, targetInFlight: 1 }, { options: ["rev:2"] })));
    h.loader.reconcileReplicas();
    await h.flush();
    expect(status(h).rollout).toMatchObject({ stale: 2, keep: 2 });
    await h.until(() => status(h).rollout?.current === 1);
    await h.until(() => status(h).rollout === undefined);
    expect(status(h)).toMatchObject({ ready: 2, stopping: 0 });
    h.loader.close();
  });
});

describe("ReplicaCountCache", () => {
  // The loader moves the watchdog and the held table together; these change one side alone, as a future path might.
  function parts() {
    const core = createWatchdogCore({ clock: { now: () => 0 }, loader: { hasModelAtAddress: () => true }, policy: {} });
    const held = new Map<string, HeldInstance>();
    const replicas = new ReplicaIndex();
    const spec = modelSpec({ id: "m", backend: "sim" });
    const hold = (incarnation: string, phase: HeldInstance["phase"]): HeldInstance => {
      const h: HeldInstance = { incarnation, model: "m", nodeId: "n1", spec, placement: "remote-only", phase, address: `a:${incarnation}`, backend: undefined, gpu: undefined, startedAtMs: 0 };
      held.set(incarnation, h);
      replicas.add("m", incarnation);
      return h;
    };
    return { s: { core, held, replicas }, core, held, replicas, hold, cache: new ReplicaCountCache() };
  }

  it("sees a held replica's phase change with nothing else changed (ready in the watchdog, held loading → ready)", () => {
    const p = parts();
    const h = p.hold("i1", "loading");
    p.core.registerReady({ nodeId: "n1", model: "m", incarnation: "i1", address: "a:i1", sizeBytes: 1 });
    expect(p.cache.counts(p.s, "m")).toMatchObject({ ready: 0, loading: 1 });
    setPhase(p.s, h, "ready");
    expect(p.cache.counts(p.s, "m")).toMatchObject({ ready: 1, loading: 0 });
  });

  it("sees a replica held, or dropped, with no watchdog record (a start not admitted yet)", () => {
    const p = parts();
    expect(p.cache.counts(p.s, "m")).toMatchObject({ loading: 0 });
    p.hold("i1", "starting");
    expect(p.cache.counts(p.s, "m")).toMatchObject({ loading: 1 });
    p.hold("i2", "starting");
    expect(p.cache.counts(p.s, "m")).toMatchObject({ loading: 2 });
    p.held.delete("i1");
    p.replicas.remove("m", "i1");
    expect(p.cache.counts(p.s, "m")).toMatchObject({ loading: 1 });
  });

  it("sees a watchdog transition with the held table unchanged (ready → pending), and answers a second read unchanged", () => {
    const p = parts();
    p.hold("i1", "ready");
    p.core.registerReady({ nodeId: "n1", model: "m", incarnation: "i1", address: "a:i1", sizeBytes: 1 });
    expect(p.cache.counts(p.s, "m")).toMatchObject({ ready: 1, stopping: 0 });
    p.core.selectExplicit("i1", { reason: "admin", force: true });
    expect(p.cache.counts(p.s, "m")).toMatchObject({ ready: 0, stopping: 1 });
    expect(p.cache.counts(p.s, "m")).toBe(p.cache.counts(p.s, "m"));
  });
});
