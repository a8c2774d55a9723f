import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { BackendState, InventoryEntrySchema, OrphanProcessSchema, type OrphanProcess } from "@warden/proto";
import { ManualClock } from "@warden/common";
import type { AgentPort, Loader } from "@warden/loader";
import type { AgentConnector } from "./agent-connector.js";
import { heartbeatOrder, sequenceOutOfBounds } from "./heartbeat-order.js";
import { massUnreachability, nextHealth } from "./node-health.js";
import { NodeTable } from "./node-table.js";

interface FakeClient {
  readonly address: string;
  closed: boolean;
  readonly watches: AbortSignal[];
}

interface PendingStop {
  readonly pid: number;
  readonly resolve: (alreadyGone: boolean) => void;
  readonly reject: (err: Error) => void;
}

/** A hand-written connector: clients are records, stops wait for the test to answer them. */
function fakeConnector() {
  const made: FakeClient[] = [];
  const stops: PendingStop[] = [];
  const port: AgentPort = {
    startBackend: () => {
      throw new Error("not used");
    },
    stopBackend: () => Promise.reject(new Error("not used")),
    freeBackend: () => Promise.reject(new Error("not used")),
    isRunning: () => Promise.reject(new Error("not used")),
  };
  const connector: AgentConnector<FakeClient> = {
    connect: (address) => {
      const c: FakeClient = { address, closed: false, watches: [] };
      made.push(c);
      return c;
    },
    agentPort: () => port,
    close: (c) => {
      c.closed = true;
    },
    stopOrphan: (_c, o) =>
      new Promise((resolve, reject) => {
        stops.push({ pid: o.pid, resolve: (alreadyGone) => { resolve({ alreadyGone }); }, reject });
      }),
    watchExits: (_nodeId, c, signal) => {
      c.watches.push(signal);
    },
  };
  return { connector, made, stops };
}

function table(clock: ManualClock, orphanGraceMs = 1_000) {
  const f = fakeConnector();
  const events: string[] = [];
  const orphanEvents: string[] = [];
  const t = new NodeTable<FakeClient>({
    clock,
    connector: f.connector,
    graceMs: 5_000,
    lostAfterMs: 60_000,
    orphanGraceMs,
    onNodeEvent: (nodeId, kind) => events.push(`${nodeId}:${kind}`),
    onOrphan: (nodeId, o, kind, detail) => orphanEvents.push(`${nodeId}:${String(o.pid)}:${kind}${detail === "" ? "" : `:${detail}`}`),
  });
  return { t, events, orphanEvents, ...f };
}

const reg = (nodeId: string, address: string, bootEpoch = 1n) => ({ nodeId, address, labels: {}, gpus: [], bootEpoch });
const hb = (nodeId: string, sequence: bigint, orphans: OrphanProcess[] = []) => ({ nodeId, bootEpoch: 1n, sequence, backends: [], orphans, resources: undefined });
const orphan = (pid: number): OrphanProcess => create(OrphanProcessSchema, { pid, address: `127.0.0.1:${String(20_000 + pid)}` });
const settle = async (): Promise<void> => {
  for (let i = 0; i < 3; i++) await Promise.resolve();
};

describe("node health", () => {
  it("every transition: a heartbeat readies, silence makes a ready node unreachable, the timeout loses an unreachable one, an operator loses any", () => {
    const states = ["ready", "unreachable", "lost"] as const;
    const table = (cause: Parameters<typeof nextHealth>[1]) => states.map((s) => nextHealth(s, cause));
    expect(table("heartbeat")).toEqual([undefined, "ready", "ready"]);
    expect(table("silent")).toEqual(["unreachable", undefined, undefined]);
    expect(table("timeout")).toEqual([undefined, "lost", undefined]);
    expect(table("operator")).toEqual(["lost", "lost", undefined]);
  });

  it("mass unreachability needs at least 3 unreachable and 55 % of the nodes that count (not embedded, not lost)", () => {
    const n = (state: "ready" | "unreachable" | "lost", embedded = false) => ({ state, embedded });
    expect(massUnreachability([n("unreachable"), n("unreachable"), n("lost")])).toEqual({ paused: false, unreachable: 2, total: 2 });
    expect(massUnreachability([n("unreachable"), n("unreachable"), n("unreachable"), n("ready"), n("ready")])).toEqual({ paused: true, unreachable: 3, total: 5 });
    expect(massUnreachability([n("unreachable"), n("unreachable"), n("unreachable"), n("ready"), n("ready"), n("ready")])).toEqual({ paused: false, unreachable: 3, total: 6 });
    expect(massUnreachability([n("unreachable"), n("unreachable"), n("unreachable"), n("ready", true), n("ready", true)]).paused).toBe(true);
  });
});

describe("heartbeat order", () => {
  it("orders by (boot epoch, sequence); the registered sequence is taken once, for the first inventory", () => {
    const last = { bootEpoch: 2n, sequence: 5n, hasInventory: true };
    expect(heartbeatOrder(undefined, { bootEpoch: 1n, sequence: 1n })).toBe("unknown");
    // An older epoch: a delayed report, or a restart after the wall clock stepped back — register again.
    expect(heartbeatOrder(last, { bootEpoch: 1n, sequence: 99n })).toBe("register-again");
    expect(heartbeatOrder(last, { bootEpoch: 3n, sequence: 0n })).toBe("register-again");
    expect(heartbeatOrder(last, { bootEpoch: 2n, sequence: 4n })).toBe("stale");
    expect(heartbeatOrder(last, { bootEpoch: 2n, sequence: 5n })).toBe("stale");
    expect(heartbeatOrder({ ...last, hasInventory: false }, { bootEpoch: 2n, sequence: 5n })).toBe("apply");
    expect(heartbeatOrder(last, { bootEpoch: 2n, sequence: 6n })).toBe("apply");
  });
});

describe("NodeTable over a fake connector", () => {
  it("bundleStale: an instance reported from another bundle than its node's catalog names now; false when either is unknown", () => {
    const clock = new ManualClock();
    const { t } = table(clock);
    const [v1, v2] = ["1".repeat(64), "2".repeat(64)];
    const entry = (incarnation: string, bundleDigest: string) => create(InventoryEntrySchema, { incarnation, model: "m", address: "127.0.0.1:9", state: BackendState.READY, backend: "b", bundleDigest });
    t.register({ ...reg("a", "h:1"), backends: ["b", "plain"], backendBundles: { b: v1 } });
    t.receive({ ...hb("a", 1n), backends: [entry("01ARZ3NDEKTSV4RRFFQ69G5FAV", v1), entry("01ARZ3NDEKTSV4RRFFQ69G5FAW", ""), entry("01ARZ3NDEKTSV4RRFFQ69G5FAX", v2)] });
    expect(["FAV", "FAW", "FAX", "FAY"].map((s) => t.bundleStale("a", `01ARZ3NDEKTSV4RRFFQ69G5${s}`, "b"))).toEqual([false, false, true, false]);
    expect(t.bundleStale("a", "01ARZ3NDEKTSV4RRFFQ69G5FAX", "plain")).toBe(false); // no bundle named for it
    expect(t.bundleStale("z", "01ARZ3NDEKTSV4RRFFQ69G5FAX", "b")).toBe(false);
    // the agent restarted with the catalog naming v2: the other one is stale now
    t.register({ ...reg("a", "h:1", 2n), backends: ["b"], backendBundles: { b: v2 } });
    t.receive({ ...hb("a", 1n), bootEpoch: 2n, backends: [entry("01ARZ3NDEKTSV4RRFFQ69G5FAV", v1), entry("01ARZ3NDEKTSV4RRFFQ69G5FAX", v2)] });
    expect(["FAV", "FAX"].map((s) => t.bundleStale("a", `01ARZ3NDEKTSV4RRFFQ69G5${s}`, "b"))).toEqual([true, false]);
    t.close();
  });

  it("re-registration: same address and epoch keeps the record; a new epoch keeps the client and restarts the watch; a new address closes the old client", () => {
    const clock = new ManualClock();
    const { t, made, events } = table(clock);
    const first = t.register(reg("a", "h:1"));
    expect(t.register(reg("a", "h:1"))).toBe(first);
    expect(made).toHaveLength(1);
    const second = t.register(reg("a", "h:1", 2n));
    expect(second).not.toBe(first);
    expect(made).toHaveLength(1);
    expect(made[0]?.watches.map((s) => s.aborted)).toEqual([true, false]);
    t.register(reg("a", "h:2", 2n));
    expect(made.map((c) => [c.address, c.closed])).toEqual([["h:1", true], ["h:2", false]]);
    expect(events).toEqual(["a:registered", "a:registered", "a:registered"]);
    t.close();
    expect(made[1]?.closed).toBe(true);
    expect(made[1]?.watches[0]?.aborted).toBe(true);
  });

  it("findModel marks a hit ready only when the agent lists it READY with no stop requested (seeds 34087, 35615)", () => {
    const clock = new ManualClock();
    const { t } = table(clock);
    t.register(reg("a", "h:1"));
    const entry = (incarnation: string, state: BackendState, stopRequested = false) =>
      create(InventoryEntrySchema, { incarnation, model: "m", address: `h:${incarnation}`, state, ...(stopRequested ? { stopRequested: { incarnation, reason: "admin" } } : {}) });
    t.heartbeat({ ...hb("a", 1n), backends: [entry("R", BackendState.READY), entry("L", BackendState.LOADING), entry("S", BackendState.SPAWNING), entry("Q", BackendState.READY, true), entry("T", BackendState.STOPPING, true)] });
    const answer = t.findModel("m");
    expect(answer.t === "found" ? answer.hits.map((x) => [x.incarnation, x.ready]) : answer).toEqual([["R", true], ["L", false], ["S", false], ["Q", false], ["T", false]]);
  });

  it("a confirmed-gone incarnation is fenced from inventories up to one past the sequence seen at the confirmation", () => {
    const clock = new ManualClock();
    const { t } = table(clock);
    t.register(reg("a", "h:1"));
    const entry = create(InventoryEntrySchema, { incarnation: "X", model: "m", address: "h:9", state: BackendState.READY });
    const beat = (sequence: bigint) => t.heartbeat({ ...hb("a", sequence), backends: [entry] });
    beat(3n);
    expect(t.findModel("m").t).toBe("found");
    t.confirmedGone("a", "X");
    expect(t.get("a")?.inventory).toEqual([]);
    beat(4n); // may have been taken before the stop took effect
    expect(t.findModel("m")).toEqual({ t: "absent" });
    beat(5n); // beyond the fence: an inventory that lists it means it runs
    expect(t.findModel("m")).toEqual({ t: "found", hits: [{ nodeId: "a", address: "h:9", incarnation: "X", ready: true }] });
    expect(t.get("a")?.fences.size).toBe(0);
  });

  it("an orphan past its grace is stopped once through the connector, not while mass unreachability pauses, and retried after a failed stop", async () => {
    const clock = new ManualClock();
    const { t, stops, orphanEvents } = table(clock);
    // Credentialed nodes count toward the mass-unreachability guard before their first heartbeat.
    for (const id of ["a", "b", "c", "d"]) t.register({ ...reg(id, `h:${id}`), credentialed: true });
    t.heartbeat(hb("a", 1n, [orphan(7)]));
    clock.advance(6_000);
    t.checkHealth();
    expect(t.unreachabilityPaused).toBe(true);
    t.heartbeat(hb("a", 2n, [orphan(7)]));
    expect(stops).toEqual([]);
    t.heartbeat(hb("b", 1n));
    t.heartbeat(hb("c", 1n));
    t.checkHealth();
    expect(t.unreachabilityPaused).toBe(false);
    t.heartbeat(hb("a", 3n, [orphan(7)]));
    t.heartbeat(hb("a", 4n, [orphan(7)])); // in flight: not sent again
    expect(stops.map((s) => s.pid)).toEqual([7]);
    stops[0]?.reject(new Error("agent unavailable"));
    await settle();
    t.heartbeat(hb("a", 5n, [orphan(7)]));
    expect(stops.map((s) => s.pid)).toEqual([7, 7]);
    stops[1]?.resolve(true);
    await settle();
    expect(orphanEvents).toEqual(["a:7:stopping", "a:7:failed:agent unavailable", "a:7:stopping", "a:7:stopped:already gone"]);
  });

  it("an agent that restarts (new boot epoch, no credential) keeps the vouching its node id earned: a full disruption right after still pauses node loss", () => {
    const clock = new ManualClock();
    const { t, events } = table(clock);
    for (const id of ["a", "b", "c"]) t.register(reg(id, `h:${id}`));
    for (const id of ["a", "b", "c"]) t.heartbeat(hb(id, 1n));
    // c's agent restarts and registers again, uncredentialed (auth off); no heartbeat of its new boot arrives.
    t.register(reg("c", "h:c", 2n));
    expect(t.get("c")?.vouched).toBe(true);
    // Junk that never heartbeated stays unvouched when it registers again.
    t.register(reg("junk", "h:j"));
    t.register(reg("junk", "h:j", 2n));
    expect(t.get("junk")?.vouched).toBe(false);
    clock.advance(6_000); // every node silent past grace (the coordinator is isolated)
    t.checkHealth();
    expect(t.unreachabilityPaused).toBe(true);
    clock.advance(61_000);
    t.checkHealth();
    expect(events.filter((e) => e.endsWith(":lost"))).toEqual([]);
  });

  it("a heartbeat that arrived but waits for its turn keeps its node reachable; one of another boot epoch than the registration does not", () => {
    const clock = new ManualClock();
    const { t, events } = table(clock);
    for (const id of ["a", "b"]) t.register(reg(id, `h:${id}`));
    for (const id of ["a", "b"]) t.heartbeat(hb(id, 1n));
    clock.advance(4_000);
    // Both agents' next heartbeats are in: a's held behind the coordinator's backlog; b's from a boot it has not registered (it must register first).
    t.arrived("a", 1n);
    t.arrived("b", 2n);
    clock.advance(2_000); // 6 s after the last applied heartbeat: past grace, 2 s after a's arrived
    t.checkHealth();
    expect(t.get("a")?.state).toBe("ready");
    expect(t.get("b")?.state).toBe("unreachable");
    // Its turn at last (released, then applied): nothing else changed meanwhile.
    t.released("a", 1n);
    t.heartbeat(hb("a", 2n));
    expect(t.get("a")?.sequence).toBe(2n);
    clock.advance(5_001);
    t.checkHealth();
    expect(t.get("a")?.state).toBe("unreachable");
    expect(events.filter((e) => e.endsWith(":unreachable"))).toEqual(["b:unreachable", "a:unreachable"]);
  });

  it("a held heartbeat keeps its node reachable however long its turn takes; once released, silence counts from the release", () => {
    const clock = new ManualClock();
    const { t, events } = table(clock);
    for (const id of ["a", "b"]) t.register(reg(id, `h:${id}`));
    for (const id of ["a", "b"]) t.heartbeat(hb(id, 1n));
    // Both held behind a backlog far longer than grace; b's twice (two streams of one agent, say).
    t.arrived("a", 1n);
    t.arrived("b", 1n);
    t.arrived("b", 1n);
    clock.advance(30_000);
    t.checkHealth();
    expect([t.get("a")?.state, t.get("b")?.state]).toEqual(["ready", "ready"]);
    // a's turn came and its stream had ended meanwhile (nothing applied); one of b's two came.
    t.released("a", 1n);
    t.released("b", 1n);
    clock.advance(5_001);
    t.checkHealth();
    expect([t.get("a")?.state, t.get("b")?.state]).toEqual(["unreachable", "ready"]);
    // A release of another boot than the registration's, or one more than were held, changes nothing.
    t.released("b", 2n);
    t.released("a", 1n);
    clock.advance(60_000);
    t.checkHealth();
    expect(t.get("b")?.state).toBe("ready");
    t.released("b", 1n);
    clock.advance(5_001);
    t.checkHealth();
    expect(t.get("b")?.state).toBe("unreachable");
    expect(events.filter((e) => e.endsWith(":unreachable"))).toEqual(["a:unreachable", "b:unreachable"]);
  });

  it("lost-after counts from when the node was seen unreachable: a coordinator paused past grace + lost-after loses no node on waking", () => {
    const clock = new ManualClock();
    const { t, events } = table(clock);
    // Credentialed (as with auth on), so each counts toward the mass-unreachability guard before its first heartbeat.
    for (const id of ["a", "b", "c", "d"]) t.register({ ...reg(id, `h:${id}`), credentialed: true });
    events.length = 0;
    clock.advance(5_000 + 60_000 + 1_000); // the coordinator was stalled: every silence is past grace + lost-after
    t.checkHealth();
    expect(t.unreachabilityPaused).toBe(true);
    // The agents' heartbeats, buffered during the pause, arrive: the guard lifts before the last ones are in.
    t.heartbeat(hb("a", 1n));
    t.heartbeat(hb("b", 1n));
    t.checkHealth();
    expect(t.unreachabilityPaused).toBe(false);
    expect(events.filter((e) => e.endsWith(":lost"))).toEqual([]);
    t.heartbeat(hb("c", 1n));
    clock.advance(60_000); // d was seen unreachable for exactly lost-after: not yet
    t.heartbeat(hb("a", 2n));
    t.heartbeat(hb("b", 2n));
    t.heartbeat(hb("c", 2n));
    t.checkHealth();
    expect(t.get("d")?.state).toBe("unreachable");
    clock.advance(1);
    t.checkHealth();
    expect(t.get("d")?.state).toBe("lost");
    expect(events.filter((e) => e.endsWith(":lost"))).toEqual(["d:lost"]);
  });

  it("an agent's version other than the coordinator's is reported once per change, not per re-registration", () => {
    const clock = new ManualClock();
    const mismatches: string[] = [];
    const t = new NodeTable<FakeClient>({
      clock,
      connector: fakeConnector().connector,
      graceMs: 5_000,
      version: "1.0.0",
      onVersionMismatch: (nodeId, v) => mismatches.push(`${nodeId}:${v}`),
      onNodeEvent: () => {},
    });
    t.register({ ...reg("a", "h:1"), version: "0.9.0" });
    t.register({ ...reg("a", "h:1"), version: "0.9.0" });
    t.register({ ...reg("a", "h:1", 2n), version: "1.0.0" });
    t.register(reg("a", "h:1", 3n)); // an agent before 0.2 sends none
    t.register({ ...reg("b", "h:2"), version: "1.0.0" });
    expect(mismatches).toEqual(["a:0.9.0", "a:"]);
    expect(t.get("a")?.version).toBe("");
  });
});

/** The loader's side of an inventory for intents it no longer tracks: it tracks nothing, adopts nothing. */
function loaderTrackingNothing(): Loader {
  const port: Partial<Loader> = {
    knows: () => false,
    isGone: () => false,
    nodeOf: () => undefined,
    modelSpec: () => undefined,
    stopInFlight: () => false,
    adoptRemoteOnly: () => false,
    adoptLeftover: () => false,
    onBackendGone: () => {},
    heldInstances: () => [],
    leftoverList: () => [],
    heldOn: () => [],
    heldStamp: () => 0,
    leftoversOn: () => [],
    startingElsewhere: () => [].values(), journalReplicas: { ofModel: () => [].values(), nodeReported: () => [] } as unknown as Loader["journalReplicas"],
    retryLeftoversNow: () => {},
    bundlesChanged: () => {},
    setOrphans: () => {},
  };
  return port as unknown as Loader;
}

/** A table whose open stop intents (incarnation → node) are settled as the outbox's are: reported gone, then cleared. */
function intentTable(open: Map<string, string>) {
  const f = fakeConnector();
  const reaped: string[] = [];
  const t = new NodeTable<FakeClient>({
    clock: new ManualClock(),
    connector: f.connector,
    graceMs: 5_000,
    onNodeEvent: () => {},
    openIntentsOn: (nodeId) => [...open].flatMap(([inc, on]) => (on === nodeId ? [inc] : [])),
    onIntentsGone: (nodeId, gone) => {
      for (const inc of gone) {
        reaped.push(`${nodeId}:${inc}`);
        open.delete(inc);
      }
    },
  });
  t.attach(loaderTrackingNothing(), (inc) => open.has(inc));
  const entry = (incarnation: string) => create(InventoryEntrySchema, { incarnation, model: "m", address: `h:${incarnation}`, state: BackendState.READY });
  const beat = (nodeId: string, sequence: bigint, listed: string[], bootEpoch = 1n) => t.heartbeat({ ...hb(nodeId, sequence), bootEpoch, backends: listed.map(entry) });
  return { t, reaped, beat };
}

describe("open stop intents the loader no longer tracks", () => {
  it("are gone only when two applied inventories in a row lack the incarnation: one does not, a present one in between resets, a stale one does not count", () => {
    const open = new Map([["X", "a"], ["Y", "a"], ["Z", "b"]]);
    const { t, reaped, beat } = intentTable(open);
    t.register(reg("a", "h:1"));
    t.register(reg("b", "h:2"));
    beat("a", 1n, ["Y"]); // taken before X started, say: X's process may well run
    beat("b", 1n, []); // another node's inventory says nothing of a's intents
    expect(reaped).toEqual([]);
    beat("a", 2n, ["X", "Y"]); // present again: the count starts over
    beat("a", 3n, ["Y"]);
    expect(reaped).toEqual([]);
    beat("a", 2n, ["Y"]); // stale (older sequence): not applied, not counted
    expect(reaped).toEqual([]);
    beat("a", 4n, ["Y"]);
    expect(reaped).toEqual(["a:X"]);
    beat("b", 2n, []);
    expect(reaped).toEqual(["a:X", "b:Z"]);
    expect([...open.keys()]).toEqual(["Y"]);
    expect(t.get("a")?.intentMisses.size).toBe(0);
  });

  it("a cleared intent's count is dropped; the same boot on a new address counts on; a new boot epoch counts afresh", () => {
    const open = new Map([["X", "a"], ["Y", "a"]]);
    const { t, reaped, beat } = intentTable(open);
    t.register(reg("a", "h:1"));
    beat("a", 1n, []);
    expect(t.get("a")?.intentMisses).toEqual(new Map([["X", 1], ["Y", 1]]));
    open.delete("Y"); // settled otherwise (the loader's stop confirmed, say)
    t.register(reg("a", "h:3")); // same boot epoch, new address: the sequence goes on
    beat("a", 2n, []);
    expect(reaped).toEqual(["a:X"]);
    expect(t.get("a")?.intentMisses.size).toBe(0);
    open.set("Y", "a");
    beat("a", 3n, []);
    t.register(reg("a", "h:3", 2n)); // the agent restarted: its first inventory alone proves nothing
    beat("a", 1n, [], 2n);
    expect(reaped).toEqual(["a:X"]);
    beat("a", 2n, [], 2n);
    expect(reaped).toEqual(["a:X", "a:Y"]);
  });
});

describe("sequenceOutOfBounds", () => {
  it("bounds the step past the last applied sequence by 1024 + 100/s since it; the first inventory sets the baseline; 2^53 is the ceiling", () => {
    const last = { sequence: 10n, hasInventory: true };
    expect(sequenceOutOfBounds(last, 10n + 1024n, 0)).toBeUndefined();
    expect(sequenceOutOfBounds(last, 10n + 1025n, 0)).toMatch(/jumps 1025/);
    expect(sequenceOutOfBounds(last, 10n + 1024n + 100n, 1_000)).toBeUndefined();
    expect(sequenceOutOfBounds(last, 2n ** 62n, 86_400_000)).toMatch(/is above/);
    expect(sequenceOutOfBounds(last, 5n, 0)).toBeUndefined(); // older: stale, not refused
    expect(sequenceOutOfBounds({ sequence: 0n, hasInventory: false }, 5_000_000n, 0)).toBeUndefined();
  });

  it("a refused heartbeat changes nothing: not its sequence, inventory or health", () => {
    const clock = new ManualClock();
    const { t } = table(clock);
    t.register(reg("a", "h:a"));
    expect(t.heartbeat(hb("a", 1n))).toBe(true);
    expect(() => t.heartbeat(hb("a", 2n ** 40n))).toThrow(expect.objectContaining({ details: { field: "sequence" } }));
    expect(t.get("a")?.sequence).toBe(1n);
    expect(t.heartbeat(hb("a", 2n))).toBe(true);
    expect(t.get("a")?.sequence).toBe(2n);
  });
});
