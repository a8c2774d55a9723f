import { describe, expect, it } from "vitest";
import { Code, ManualClock, WardenError, notLeaderError, seededRng } from "@warden/common";
import type { HeartbeatRequest, RegisterRequest } from "@warden/proto";
import { create } from "@bufbuild/protobuf";
import { HeartbeatRequestSchema, RegisterRequestSchema } from "@warden/proto";
import { createNodeHeartbeat, type HeartbeatSource, type NodeServicePort } from "./node-heartbeat.js";

const source: HeartbeatSource = {
  bootEpochMs: 1_700_000_000_000,
  inventory: async () => ({ backends: [{ incarnation: "01J0000000000000000000000A", model: "m" }], orphans: [], foreign: [{ pid: 4242, address: "127.0.0.1:21000", detail: "no Warden mark" }], bootEpochMs: 1_700_000_000_000, leaderEpoch: 0n }),
  nodeResources: async () => ({ gpus: [], ramTotalBytes: 1000n, ramUsedBytes: 10n }),
};

/** A scripted coordinator: `down` makes every call fail UNAVAILABLE. */
function fakeNode() {
  const calls: ({ t: "register"; req: RegisterRequest } | { t: "heartbeat"; req: HeartbeatRequest })[] = [];
  const state = { down: false, registerRequiredNext: false, fullRequiredNext: false };
  const port: NodeServicePort = {
    async register(req) {
      if (state.down) throw new WardenError(Code.Unavailable, "connection refused");
      calls.push({ t: "register", req: create(RegisterRequestSchema, req) });
      return { coordinatorEpoch: 1n, heartbeatIntervalMs: 0 };
    },
    async heartbeat(req) {
      if (state.down) throw new WardenError(Code.Unavailable, "connection refused");
      calls.push({ t: "heartbeat", req: create(HeartbeatRequestSchema, req) });
      const registerRequired = state.registerRequiredNext;
      const fullInventoryRequired = state.fullRequiredNext;
      state.registerRequiredNext = false;
      state.fullRequiredNext = false;
      return { registerRequired, coordinatorEpoch: 1n, fullInventoryRequired };
    },
  };
  return { port, calls, state };
}

const flush = async () => {
  for (let i = 0; i < 10; i++) await new Promise((r) => setImmediate(r));
};

describe("node heartbeat loop", () => {
  it("delta heartbeats: full first, then deltas against the acknowledged one; full_inventory_required, a registration and the period each bring a full one", async () => {
    const clock = new ManualClock();
    const node = fakeNode();
    const hb = createNodeHeartbeat({ nodeId: "n1", address: "a:1", labels: {}, backends: ["sim"], source, node: node.port, intervalMs: 1_000, fullInventoryEveryMs: 10_000, clock, rng: seededRng(1) });
    hb.start();
    await flush();
    const kinds = () => node.calls.map((c) => (c.t === "register" ? "register" : c.req.delta === undefined ? `full:${String(c.req.backends.length)}` : `delta:${String(c.req.delta.baseSequence)}`));
    for (let i = 0; i < 3; i++) {
      clock.advance(1_000);
      await flush();
    }
    expect(kinds()).toEqual(["register", "full:1", "delta:1", "delta:2"]);
    const first = node.calls[2];
    expect(first?.t === "heartbeat" ? first.req.backends : undefined).toEqual([]);
    node.state.fullRequiredNext = true;
    clock.advance(1_000);
    await flush();
    clock.advance(1_000);
    await flush();
    // The delta of sequence 4 was answered full_inventory_required: 5 is full, 6 a delta against it.
    clock.advance(1_000);
    await flush();
    expect(kinds().slice(4)).toEqual(["delta:3", "full:1", "delta:5"]);
    expect(hb.stats()).toMatchObject({ fullRequested: 1 });
    node.state.registerRequiredNext = true;
    clock.advance(1_000);
    await flush();
    clock.advance(1_000);
    await flush();
    expect(kinds().slice(7)).toEqual(["delta:6", "register", "full:1"]);
    // Ten seconds after the last full one, the next is full whatever was acknowledged.
    for (let i = 0; i < 10; i++) {
      clock.advance(1_000);
      await flush();
    }
    expect(kinds().slice(10)).toEqual([...Array.from({ length: 9 }, (_, i) => `delta:${String(8 + i)}`), "full:1"]);
    await hb.stop();
  });

  it("registers, beats once per interval of the injected clock, re-registers on request, backs off while down", async () => {
    const clock = new ManualClock();
    const node = fakeNode();
    const hb = createNodeHeartbeat({ nodeId: "n1", address: "a:1", labels: { z: "1" }, backends: ["sim"], source, node: node.port, intervalMs: 1_000, clock, rng: seededRng(1) });
    hb.start();
    await flush();
    expect(node.calls.map((c) => c.t)).toEqual(["register"]);
    clock.advance(999);
    await flush();
    expect(node.calls).toHaveLength(1);
    clock.advance(1);
    await flush();
    expect(node.calls.map((c) => c.t)).toEqual(["register", "heartbeat"]);
    node.state.registerRequiredNext = true;
    clock.advance(1_000);
    await flush();
    // register_required: register again at once, without waiting an interval
    expect(node.calls.map((c) => c.t)).toEqual(["register", "heartbeat", "heartbeat", "register"]);
    node.state.down = true;
    const failuresBefore = hb.stats().failures;
    for (let i = 0; i < 5; i++) {
      clock.advance(5_000);
      await flush();
    }
    expect(hb.stats().failures).toBeGreaterThan(failuresBefore);
    node.state.down = false;
    clock.advance(6_000);
    await flush();
    clock.advance(1_000);
    await flush();
    const beats = node.calls.flatMap((c) => (c.t === "heartbeat" ? [c.req] : []));
    expect(beats.length).toBeGreaterThanOrEqual(3);
    const seqs = beats.map((b) => b.sequence);
    expect(seqs.every((s, i) => i === 0 || s > (seqs[i - 1] ?? 0n))).toBe(true);
    expect(beats.every((b) => b.bootEpoch === 1_700_000_000_000n && b.nodeId === "n1")).toBe(true);
    expect(beats[0]?.backends[0]?.incarnation).toBe("01J0000000000000000000000A");
    // foreign processes ride along, so the coordinator can report them (ListNodes, foreign.detected)
    expect(beats[0]?.foreign.map((f) => [f.pid, f.address, f.detail])).toEqual([[4242, "127.0.0.1:21000", "no Warden mark"]]);
    await hb.stop();
  });

  it("raises the agent's fence to the leader epoch a coordinator answers with, before the node counts as registered", async () => {
    const clock = new ManualClock();
    const raised: bigint[] = [];
    const src: HeartbeatSource = { ...source, raiseLeaderEpoch: async (e) => { raised.push(e); } };
    let epoch = 5n;
    const port: NodeServicePort = {
      register: async () => ({ coordinatorEpoch: 1n, heartbeatIntervalMs: 0, leaderEpoch: epoch }),
      heartbeat: async () => ({ registerRequired: false, coordinatorEpoch: 1n, leaderEpoch: epoch }),
    };
    const hb = createNodeHeartbeat({ nodeId: "n1", address: "a:1", labels: {}, backends: [], source: src, node: port, intervalMs: 1_000, clock, rng: seededRng(1) });
    hb.start();
    await flush();
    expect([raised, hb.stats().registered]).toEqual([[5n], true]);
    epoch = 9n;
    clock.advance(1_000);
    await flush();
    expect(raised).toEqual([5n, 9n]);
    epoch = 0n; // a coordinator without HA announces nothing
    clock.advance(1_000);
    await flush();
    expect(raised).toEqual([5n, 9n]);
    await hb.stop();
  });

  it("retries a standby's refusal at the first backoff step instead of growing the delay (the new leader hears the node soon after it leads)", async () => {
    const clock = new ManualClock();
    let calls = 0;
    const port: NodeServicePort = {
      register: async () => {
        calls++;
        throw notLeaderError(undefined);
      },
      heartbeat: async () => ({ registerRequired: false, coordinatorEpoch: 1n }),
    };
    const hb = createNodeHeartbeat({ nodeId: "n1", address: "a:1", labels: {}, backends: [], source, node: port, intervalMs: 1_000, clock, rng: seededRng(1), backoff: { initialMs: 100, factor: 2, maxMs: 10_000, jitter: 0 } });
    hb.start();
    await flush();
    // Ten refusals in a row: with growing backoff the tenth would wait 51 s; here each waits 100 ms.
    for (let i = 0; i < 10; i++) {
      clock.advance(100);
      await flush();
    }
    expect(calls).toBe(11);
    await hb.stop();
  });
});
