import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { InventoryEntrySchema, BackendState, OrphanProcessSchema, type AgentService, type OrphanProcess } from "@warden/proto";
import { ManualClock, nullLogger } from "@warden/common";
import type { Client } from "@warden/grpc";
import { NodeRegistry } from "./node-registry.js";
import { idleWatchBackends } from "../test-kit/idle-watch.fixture.js";

/** An agent client that is never called over the network: WatchBackends idles until aborted. */
function idleClient(): Client<typeof AgentService> {
  return {
    close() {},
    watchBackends: idleWatchBackends,
  } as unknown as Client<typeof AgentService>;
}

function registry(clock: ManualClock) {
  const events: { nodeId: string; kind: string; reason?: string }[] = [];
  const pauses: { paused: boolean; unreachable: number; total: number }[] = [];
  const r = new NodeRegistry({
    clock,
    log: nullLogger,
    graceMs: 5_000,
    lostAfterMs: 60_000,
    connect: () => idleClient(),
    onNodeEvent: (nodeId, kind, _labels, reason) => events.push({ nodeId, kind, ...(reason ? { reason } : {}) }),
    onPauseChange: (paused, unreachable, total) => pauses.push({ paused, unreachable, total }),
  });
  return { r, events, pauses };
}

const hb = (nodeId: string, sequence: bigint, bootEpoch = 1n) => ({ nodeId, bootEpoch, sequence, backends: [], orphans: [], resources: undefined });

describe("NodeRegistry", () => {
  it("ignores a heartbeat older than the last one seen, and asks a restarted agent to register again", () => {
    const clock = new ManualClock();
    const { r } = registry(clock);
    r.register({ nodeId: "a", address: "127.0.0.1:1", labels: {}, gpus: [], bootEpoch: 1n });
    expect(r.heartbeat({ ...hb("a", 5n), backends: [create(InventoryEntrySchema, { incarnation: "X", model: "m", state: BackendState.READY })] })).toBe(true);
    expect(r.get("a")?.inventory).toHaveLength(1);
    expect(r.heartbeat(hb("a", 4n))).toBe(true); // stale: ignored
    expect(r.get("a")?.inventory).toHaveLength(1);
    expect(r.get("a")?.sequence).toBe(5n);
    expect(r.heartbeat(hb("a", 1n, 2n))).toBe(false); // new boot epoch: register first
    expect(r.heartbeat(hb("nobody", 1n))).toBe(false);
  });

  it("ready → unreachable after the grace → lost after lostAfter; a heartbeat brings it back", () => {
    const clock = new ManualClock();
    const { r, events } = registry(clock);
    r.register({ nodeId: "a", address: "127.0.0.1:1", labels: {}, gpus: [], bootEpoch: 1n });
    clock.advance(5_001);
    r.checkHealth();
    expect(r.get("a")?.state).toBe("unreachable");
    expect(r.isReachable("a")).toBe(false);
    // lostAfter counts from when the node was seen unreachable (not from its last heartbeat): exactly lostAfter is not yet.
    clock.advance(60_000);
    r.checkHealth();
    expect(r.get("a")?.state).toBe("unreachable");
    clock.advance(1);
    r.checkHealth();
    expect(r.get("a")?.state).toBe("lost");
    expect(r.agent("a")).toBeUndefined();
    expect(r.heartbeat(hb("a", 1n))).toBe(true);
    expect(r.get("a")?.state).toBe("ready");
    expect(events.map((e) => e.kind)).toEqual(["registered", "unreachable", "lost", "ready"]);
  });

  it("mass unreachability (>= 55 %, at least 3 nodes) pauses lost declarations and says so; it resumes when nodes return", () => {
    const clock = new ManualClock();
    const { r, events, pauses } = registry(clock);
    for (const id of ["a", "b", "c", "d"]) r.register({ nodeId: id, address: `127.0.0.1:${id.charCodeAt(0)}`, labels: {}, gpus: [], bootEpoch: 1n, credentialed: true });
    // only d keeps heartbeating
    for (let s = 1n; s <= 80n; s++) {
      clock.advance(1_000);
      r.heartbeat(hb("d", s));
      r.checkHealth();
    }
    expect(["a", "b", "c"].map((id) => r.get(id)?.state)).toEqual(["unreachable", "unreachable", "unreachable"]);
    expect(r.unreachabilityPaused).toBe(true);
    expect(pauses).toEqual([{ paused: true, unreachable: 3, total: 4 }]);
    expect(events.filter((e) => e.kind === "lost")).toEqual([]);
    // two come back: 1 of 4 unreachable, the pause ends and the last one may be declared lost
    r.heartbeat(hb("a", 1n));
    r.heartbeat(hb("b", 1n));
    r.checkHealth();
    expect(r.unreachabilityPaused).toBe(false);
    expect(pauses.at(-1)).toEqual({ paused: false, unreachable: 1, total: 4 });
    expect(r.get("c")?.state).toBe("lost");
  });

  it("an operator's word declares a node lost with its reason even while mass unreachability pauses the timeout path; a repeat changes nothing", () => {
    const clock = new ManualClock();
    const { r, events } = registry(clock);
    for (const id of ["a", "b", "c"]) r.register({ nodeId: id, address: `127.0.0.1:${id.charCodeAt(0)}`, labels: {}, gpus: [], bootEpoch: 1n, credentialed: true });
    clock.advance(5_001);
    r.checkHealth();
    expect(r.unreachabilityPaused).toBe(true);
    r.declareLost(r.get("a")!, true, "host decommissioned");
    r.declareLost(r.get("a")!, true, "again");
    expect(r.get("a")?.state).toBe("lost");
    expect(events.filter((e) => e.kind.startsWith("lost"))).toEqual([{ nodeId: "a", kind: "lost-by-operator", reason: "host decommissioned" }]);
  });

  it("two unreachable nodes out of three do not pause (fewer than three)", () => {
    const clock = new ManualClock();
    const { r, pauses } = registry(clock);
    for (const id of ["a", "b", "c"]) r.register({ nodeId: id, address: `127.0.0.1:${id.charCodeAt(0)}`, labels: {}, gpus: [], bootEpoch: 1n });
    for (let s = 1n; s <= 70n; s++) {
      clock.advance(1_000);
      r.heartbeat(hb("c", s));
      r.checkHealth();
    }
    expect(pauses).toEqual([]);
    expect(r.get("a")?.state).toBe("lost");
  });
  it("new orphans of one heartbeat are reported in one call (coalesced), each only once while it stays; the registry keeps copies of labels and GPUs", () => {
    const clock = new ManualClock();
    const batches: { nodeId: string; pids: number[] }[] = [];
    const r = new NodeRegistry({
      clock,
      log: nullLogger,
      graceMs: 5_000,
      orphanGraceMs: 3_600_000,
      connect: () => idleClient(),
      onNodeEvent: () => undefined,
      onOrphansAdopted: (nodeId, adopted: readonly OrphanProcess[]) => batches.push({ nodeId, pids: adopted.map((o) => o.pid) }),
    });
    const labels = { zone: "z1" };
    r.register({ nodeId: "a", address: "127.0.0.1:1", labels, gpus: [], bootEpoch: 1n });
    labels.zone = "changed after the call";
    expect(r.get("a")?.labels).toEqual({ zone: "z1" });
    const orphans = (pids: number[]) => pids.map((pid) => create(OrphanProcessSchema, { pid, address: `127.0.0.1:${String(20_000 + pid)}` }));
    const many = Array.from({ length: 500 }, (_, i) => i + 1);
    r.heartbeat({ ...hb("a", 1n), orphans: orphans(many) });
    r.heartbeat({ ...hb("a", 2n), orphans: orphans(many) }); // the same ones: nothing new
    r.heartbeat({ ...hb("a", 3n), orphans: orphans([...many, 900, 900]) }); // one new (listed twice)
    r.heartbeat({ ...hb("a", 4n), orphans: [] });
    expect(batches).toEqual([
      { nodeId: "a", pids: many },
      { nodeId: "a", pids: [900] },
    ]);
  });
});
