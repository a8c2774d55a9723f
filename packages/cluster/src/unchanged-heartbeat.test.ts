import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { create } from "@bufbuild/protobuf";
import { BackendState, InventoryEntrySchema, OrphanProcessSchema, inventoryDigest, type InventoryEntry } from "@warden/proto";
import { ManualClock, createUlidFactory, seededRng, sleep } from "@warden/common";
import { plantBugs } from "@warden/common/testing/planted-bugs";
import { Loader, modelSpec, type AgentPort, type LoaderEvent } from "@warden/loader";
import type { AgentConnector } from "./agent-connector.js";
import { NodeTable } from "./node-table.js";
import { settledMark, unchangedHeartbeat, type AfterReconcile, type UnchangedInput } from "./unchanged-heartbeat.js";

// An empty delta heartbeat skips the inventory reconcile only where the
// reconcile would change nothing: proven here against the full reconcile on
// the same script, with a real Loader, and condition by condition.

const bootEpoch = 3n;
const models = ["m0", "m1", "m2", "m3"];

/** One node "a" on a NodeTable with a real Loader; `skip` false reconciles every heartbeat whole. */
function cluster(skip: boolean) {
  const clock = new ManualClock(1_000);
  const events: string[] = [];
  const reaped: string[] = [];
  const openIntents = new Set<string>();
  const port: AgentPort = {
    startBackend: () => {
      throw new Error("not used");
    },
    stopBackend: () => Promise.resolve({ t: "stopped" }),
    freeBackend: () => Promise.resolve({ t: "unsupported" }),
    isRunning: () => Promise.resolve(true),
  };
  const connector: AgentConnector<object> = { connect: () => ({}), agentPort: () => port, close: () => {}, stopOrphan: () => Promise.resolve({ alreadyGone: true }), watchExits: () => {} };
  let reconciles = 0;
  const nodes = new NodeTable<object>({
    clock,
    connector,
    graceMs: 5_000,
    lostAfterMs: 1_000_000,
    orphanGraceMs: 1_000_000,
    onNodeEvent: () => {},
    skipUnchangedReconcile: skip,
    openIntentsOn: () => [...openIntents],
    onIntentsGone: (_n, gone) => {
      for (const inc of gone) {
        reaped.push(inc);
        openIntents.delete(inc);
      }
    },
  });
  const loader = new Loader({
    clock,
    rng: seededRng(1),
    sleep: (ms, signal) => sleep(clock, ms, signal),
    agents: nodes,
    backends: { connect: () => ({ free: async () => {}, close: () => {} }) },
    journal: { recordStopIntent: async () => {}, clearStopIntent: async () => {} },
    events: {
      emit: (e: LoaderEvent) => events.push(`${e.type}:${"incarnation" in e ? e.incarnation : ""}`),
      emitDurable: async (e: LoaderEvent) => {
        events.push(`${e.type}:${"incarnation" in e ? e.incarnation : ""}`);
      },
    },
    placement: { choose: () => ({ nodeId: "a", reason: "the only node" }) },
    inventories: nodes,
    mintIncarnation: () => "01JXT21ZN52BD4Z6YZPNZWTQRM",
    models: models.map((id) => modelSpec({ id, backend: "sim" })),
  });
  // Count the full reconciles: only they ask the loader whether each entry is gone.
  const isGone = loader.isGone.bind(loader);
  loader.isGone = (inc: string): boolean => {
    reconciles++;
    return isGone(inc);
  };
  nodes.attach(loader, (inc) => openIntents.has(inc));
  nodes.register({ nodeId: "a", address: "h:0", labels: {}, gpus: [], bootEpoch });
  let sequence = 0n;
  let base = 0n;
  let listed: InventoryEntry[] = [];
  const send = (r: Parameters<NodeTable<object>["receive"]>[0]): void => {
    expect(nodes.receive(r)).toBe("ok");
  };
  return {
    clock,
    nodes,
    loader,
    events,
    reaped,
    openIntents,
    reconciles: () => reconciles,
    full(entries: InventoryEntry[], orphans = 0): void {
      sequence++;
      listed = entries;
      base = sequence;
      send({ nodeId: "a", bootEpoch, sequence, backends: entries, orphans: orphanList(orphans), resources: undefined });
    },
    delta(upserts: InventoryEntry[], removed: string[], orphans = 0): void {
      sequence++;
      listed = [...listed.filter((e) => !removed.includes(e.incarnation) && !upserts.some((u) => u.incarnation === e.incarnation)), ...upserts];
      send({ nodeId: "a", bootEpoch, sequence, backends: [], delta: { baseSequence: base, upserts, removed, digest: inventoryDigest(listed) }, orphans: orphanList(orphans), resources: undefined });
      base = sequence;
    },
    listed: () => listed,
    /** Everything a reconcile decides, for comparing two runs. */
    snapshot(): unknown {
      const n = nodes.get("a");
      return {
        inventory: n?.inventory?.map((e) => `${e.incarnation}:${String(e.state)}`),
        missing: [...(n?.missing ?? [])],
        fences: [...(n?.fences ?? [])].map(([k, v]) => `${k}@${v.toString()}`),
        intentMisses: [...(n?.intentMisses ?? [])],
        state: n?.state,
        held: loader.heldOn("a").map((h) => `${h.incarnation}:${h.phase}`),
        leftovers: loader.leftoversOn("a").map((l) => l.incarnation),
        occupancy: loader.core.occupancy("a"),
        events: [...events],
        reaped: [...reaped],
      };
    },
  };
}

const orphanList = (count: number) => Array.from({ length: count }, (_, i) => create(OrphanProcessSchema, { pid: 900 + i, address: `h:${String(900 + i)}` }));
const ulid = createUlidFactory(new ManualClock(5_000), seededRng(9));
const incarnations = Array.from({ length: 8 }, () => ulid());
const entry = (i: number, state: BackendState = BackendState.READY): InventoryEntry =>
  create(InventoryEntrySchema, { incarnation: incarnations[i] ?? "", model: models[i % models.length] ?? "m0", address: `h:${String(7000 + i)}`, state });

describe("an empty delta on a settled node", () => {
  it("skips the reconcile: no entry is looked at again (with the skip off, every heartbeat reconciles all four)", () => {
    for (const skip of [true, false]) {
      const c = cluster(skip);
      c.full([0, 1, 2, 3].map((i) => entry(i)));
      expect(c.loader.heldOn("a")).toHaveLength(4);
      const before = c.reconciles();
      for (let i = 0; i < 5; i++) c.delta([], []);
      expect(c.reconciles() - before).toBe(skip ? 0 : 20);
      expect(c.nodes.get("a")?.sequence).toBe(6n);
    }
  });

  it("still counts a pending missing count: a ready instance its inventory dropped is gone at the second inventory without it (planted bug: it stays)", () => {
    const run = (): string[] => {
      const c = cluster(true);
      c.full([0, 1].map((i) => entry(i)));
      // The instance vanished without an exit report: the agent's next delta drops it (one count), the following ones are empty.
      c.delta([], []);
      c.delta([], [incarnations[1] ?? ""]);
      c.delta([], []);
      c.delta([], []);
      return c.loader.heldOn("a").map((h) => h.incarnation);
    };
    expect(run()).toEqual([incarnations[0]]);
    const undo = plantBugs(["unchanged-ignores-missing"]);
    try {
      expect(run()).toEqual([incarnations[0], incarnations[1]]);
    } finally {
      undo();
    }
  });

  it("still counts open stop intents the loader no longer tracks: one lacking from two inventories in a row is reaped on the skip", () => {
    const c = cluster(true);
    c.full([0].map((i) => entry(i)));
    c.openIntents.add(incarnations[5] ?? "");
    const before = c.reconciles();
    c.delta([], []);
    expect(c.reaped).toEqual([]);
    c.delta([], []);
    expect(c.reconciles()).toBe(before);
    expect(c.reaped).toEqual([incarnations[5]]);
  });

  it("still settles the journal's unconfirmed instances: one the inventory does not list stops counting on the skip", () => {
    const c = cluster(true);
    c.full([0].map((k) => entry(k)));
    expect(c.loader.journalReplicas.restore([{ incarnation: incarnations[6] ?? "", nodeId: "a", model: "m1", address: "h:7006" }])).toBe(1);
    const before = c.reconciles();
    c.delta([], []);
    expect(c.reconciles()).toBe(before);
    expect(c.loader.journalReplicas.list()).toEqual([]);
  });

  it("reconciles again after the loader's word on the node: a confirmed gone instance the agent still lists is fenced, then dropped", () => {
    const c = cluster(true);
    c.full([0, 1].map((i) => entry(i)));
    c.loader.onBackendGone(incarnations[1] ?? "", { exitCode: 0, signal: "", intentional: true, lastStderrLine: "" });
    const before = c.reconciles();
    c.delta([], []); // taken before the exit: still lists it
    expect(c.reconciles()).toBeGreaterThan(before);
    expect(c.nodes.get("a")?.inventory?.map((e) => e.incarnation)).toEqual([incarnations[0]]);
  });
});

type Op =
  | { readonly t: "unchanged"; readonly orphans: number }
  | { readonly t: "add"; readonly i: number; readonly state: "ready" | "starting" | "exited" }
  | { readonly t: "remove"; readonly i: number }
  | { readonly t: "full"; readonly orphans: number }
  | { readonly t: "exit-report"; readonly i: number }
  | { readonly t: "forget"; readonly i: number }
  | { readonly t: "intent"; readonly i: number }
  | { readonly t: "silence" }
  | { readonly t: "lost" };

const i = fc.nat(7);
const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ t: fc.constant("unchanged" as const), orphans: fc.constantFrom(0, 0, 0, 1) }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant("add" as const), i, state: fc.constantFrom("ready" as const, "starting" as const, "exited" as const) }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant("remove" as const), i }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("full" as const), orphans: fc.constantFrom(0, 0, 1) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("exit-report" as const), i }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("forget" as const), i }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("intent" as const), i }) },
  { weight: 1, arbitrary: fc.constant({ t: "silence" as const }) },
  { weight: 1, arbitrary: fc.constant({ t: "lost" as const }) },
);

function apply(c: ReturnType<typeof cluster>, o: Op): void {
  const inc = incarnations[o.t === "unchanged" || o.t === "full" || o.t === "silence" || o.t === "lost" ? 0 : o.i] ?? "";
  switch (o.t) {
    case "unchanged":
      c.delta([], [], o.orphans);
      return;
    case "add":
      c.delta([entry(o.i, o.state === "ready" ? BackendState.READY : o.state === "starting" ? BackendState.LOADING : BackendState.EXITED)], []);
      return;
    case "remove":
      if (c.listed().some((e) => e.incarnation === inc)) c.delta([], [inc]);
      return;
    case "full":
      c.full(c.listed(), o.orphans);
      return;
    case "exit-report":
      c.loader.onBackendGone(inc, { exitCode: 1, signal: "", intentional: false, lastStderrLine: "" });
      return;
    case "forget":
      c.loader.forget(inc, "op", "");
      return;
    case "intent":
      c.openIntents.add(inc);
      return;
    case "silence":
      c.clock.advance(6_000);
      c.nodes.checkHealth();
      return;
    case "lost": {
      const n = c.nodes.get("a");
      if (n !== undefined) c.nodes.declareLost(n, true);
      return;
    }
  }
}

describe("the skip against the full reconcile", () => {
  it("the same script of heartbeats and loader changes leaves the same node, loader, occupancy, events and reaped intents after every step", () => {
    let skipped = 0;
    fc.assert(
      fc.property(fc.array(op, { minLength: 1, maxLength: 40 }), (ops) => {
        const fast = cluster(true);
        const whole = cluster(false);
        fast.full([0, 1, 2].map((k) => entry(k)));
        whole.full([0, 1, 2].map((k) => entry(k)));
        for (const o of ops) {
          apply(fast, o);
          apply(whole, o);
          expect(fast.snapshot()).toEqual(whole.snapshot());
        }
        skipped += whole.reconciles() - fast.reconciles();
      }),
      { numRuns: 300, seed: 28 },
    );
    // The skip is taken in these scripts, not merely allowed.
    expect(skipped).toBeGreaterThan(0);
  });
});

describe("settledMark and unchangedHeartbeat, condition by condition", () => {
  const settled: AfterReconcile = { inventory: [entry(0), entry(1)], reportedCount: 2, orphanCount: 0, fenceCount: 0, missingCount: 0, held: [{ incarnation: incarnations[0] ?? "" }, { incarnation: incarnations[1] ?? "" }], heldStamp: 7, leftoverCount: 0 };
  it("marks a node settled only when nothing is pending after its reconcile", () => {
    expect(settledMark(settled)).toEqual({ heldStamp: 7 });
    expect(settledMark({ ...settled, fenceCount: 1 })).toBeUndefined();
    expect(settledMark({ ...settled, orphanCount: 1 })).toBeUndefined();
    expect(settledMark({ ...settled, leftoverCount: 1 })).toBeUndefined();
    expect(settledMark({ ...settled, missingCount: 1 })).toBeUndefined();
    expect(settledMark({ ...settled, reportedCount: 3 })).toBeUndefined(); // one was fenced or gone
    expect(settledMark({ ...settled, held: [{ incarnation: incarnations[0] ?? "" }] })).toBeUndefined(); // listed, not held
    expect(settledMark({ ...settled, held: [...settled.held, { incarnation: incarnations[2] ?? "" }] })).toBeUndefined(); // held, not listed
    expect(settledMark({ ...settled, inventory: [entry(0), entry(1, BackendState.EXITED)] })).toBeUndefined();
    expect(settledMark({ ...settled, inventory: [], reportedCount: 0, held: [] })).toEqual({ heldStamp: 7 });
  });

  it("skips only an empty delta on a node still as its mark says", () => {
    const ok: UnchangedInput = { delta: { baseSequence: 1n, upserts: [], removed: [], digest: 0n }, orphanCount: 0, mark: { heldStamp: 7 }, wasReady: true, fenceCount: 0, heldStamp: 7, leftoverCount: 0 };
    expect(unchangedHeartbeat(ok)).toBe(true);
    expect(unchangedHeartbeat({ ...ok, delta: undefined })).toBe(false);
    expect(unchangedHeartbeat({ ...ok, delta: { baseSequence: 1n, upserts: [entry(0)], removed: [], digest: 0n } })).toBe(false);
    expect(unchangedHeartbeat({ ...ok, delta: { baseSequence: 1n, upserts: [], removed: ["x"], digest: 0n } })).toBe(false);
    expect(unchangedHeartbeat({ ...ok, mark: undefined })).toBe(false);
    expect(unchangedHeartbeat({ ...ok, wasReady: false })).toBe(false);
    expect(unchangedHeartbeat({ ...ok, orphanCount: 1 })).toBe(false);
    expect(unchangedHeartbeat({ ...ok, fenceCount: 1 })).toBe(false);
    expect(unchangedHeartbeat({ ...ok, leftoverCount: 1 })).toBe(false);
    expect(unchangedHeartbeat({ ...ok, heldStamp: 8 })).toBe(false);
  });
});
