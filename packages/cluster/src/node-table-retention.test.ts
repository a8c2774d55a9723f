/**
 * What a heartbeat leaves on its node's record: unchanged parts keep the
 * record's own objects, not the heartbeat's copies. At thousands of nodes a
 * copy kept per heartbeat is promoted out of the young generation only to die
 * in the old one; what the record says must be the same either way.
 */
import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { TimestampSchema } from "@bufbuild/protobuf/wkt";
import { NodeResourcesSchema, OrphanProcessSchema, type NodeResources } from "@warden/proto";
import { ManualClock } from "@warden/common";
import type { AgentConnector } from "./agent-connector.js";
import { goneIntents } from "./gone-intents.js";
import { sameReadings } from "./memory-reading.js";
import { NodeTable } from "./node-table.js";

const unused = (): never => {
  throw new Error("not used");
};
const connector: AgentConnector<object> = { connect: () => ({}), agentPort: () => ({ startBackend: unused, stopBackend: unused, freeBackend: unused, isRunning: unused }), close: () => {}, stopOrphan: unused, watchExits: () => {} };

function resources(usedBytes: bigint, measuredAtSeconds: bigint, name = "A100"): NodeResources {
  return create(NodeResourcesSchema, { gpus: [{ index: 0, name, totalBytes: 80n << 30n, usedBytes }], ramTotalBytes: 256n << 30n, ramUsedBytes: 16n << 30n, measuredAt: { seconds: measuredAtSeconds, nanos: 0 } });
}

function oneNode() {
  const t = new NodeTable<object>({ clock: new ManualClock(), connector, graceMs: 5_000, onNodeEvent: () => {} });
  t.register({ nodeId: "a", address: "h:1", labels: {}, gpus: [], bootEpoch: 1n });
  let sequence = 0n;
  const beat = (r: NodeResources, orphans: { pid: number; address: string }[] = []) => {
    sequence++;
    expect(t.receive({ nodeId: "a", bootEpoch: 1n, sequence, backends: [], orphans: orphans.map((o) => create(OrphanProcessSchema, o)), foreign: [], resources: r })).toBe("ok");
    const n = t.get("a");
    if (n === undefined) throw new Error("node a is gone");
    return n;
  };
  return { beat };
}

describe("a heartbeat's resources, orphans and foreign lists on the node record", () => {
  it("the same figures keep the record's resources, with the new measuring time; other figures replace them", () => {
    const { beat } = oneNode();
    const first = beat(resources(1n << 30n, 100n)).resources;
    const stamp = first?.measuredAt;
    const next = resources(1n << 30n, 101n);
    next.measuredAt = create(TimestampSchema, { seconds: 101n, nanos: 5 });
    const again = beat(next).resources;
    expect(again).toBe(first);
    // The time copied into the record's own Timestamp: the heartbeat's is not kept.
    expect(again?.measuredAt).toBe(stamp);
    expect(again?.measuredAt).not.toBe(next.measuredAt);
    expect(again?.measuredAt).toMatchObject({ seconds: 101n, nanos: 5 });
    // A heartbeat without a time leaves none; the next one's is then kept as it comes.
    const untimed = resources(1n << 30n, 0n);
    delete untimed.measuredAt;
    expect(beat(untimed).resources?.measuredAt).toBeUndefined();
    const timed = resources(1n << 30n, 104n);
    expect(beat(timed).resources?.measuredAt).toBe(timed.measuredAt);
    const used = resources(2n << 30n, 105n);
    expect(beat(used).resources).toBe(used);
    const renamed = resources(2n << 30n, 106n, "H100");
    expect(beat(renamed).resources).toBe(renamed);
  });

  it("empty orphan and foreign lists keep the record's own; a non-empty one replaces it, and an empty one after it too", () => {
    const { beat } = oneNode();
    const n = beat(resources(0n, 1n));
    const orphans = n.orphans;
    const foreign = n.foreign;
    expect(beat(resources(0n, 2n)).orphans).toBe(orphans);
    expect(n.foreign).toBe(foreign);
    expect(beat(resources(0n, 3n), [{ pid: 7, address: "127.0.0.1:9" }]).orphans.map((o) => o.pid)).toEqual([7]);
    expect(beat(resources(0n, 4n)).orphans).toEqual([]);
  });
});

describe("sameReadings", () => {
  it("compares every figure but the measuring time", () => {
    expect(sameReadings(resources(1n, 1n), resources(1n, 2n))).toBe(true);
    expect(sameReadings(resources(1n, 1n), resources(2n, 1n))).toBe(false);
    expect(sameReadings(resources(1n, 1n), resources(1n, 1n, "other"))).toBe(false);
    expect(sameReadings(resources(1n, 1n), create(NodeResourcesSchema, { ...resources(1n, 1n), ramUsedBytes: 1n }))).toBe(false);
    expect(sameReadings(resources(1n, 1n), create(NodeResourcesSchema, { ...resources(1n, 1n), gpus: [] }))).toBe(false);
  });
});

describe("goneIntents with nothing watched", () => {
  it("keeps an empty count map as it is, and gives no new map for a node with nothing to count", () => {
    const none = new Map<string, number>();
    expect(goneIntents(none, [], new Set()).missing).toBe(none);
    const stale = new Map([["X", 1]]);
    const r = goneIntents(stale, [], new Set());
    expect(r.missing.size).toBe(0);
    expect(goneIntents(new Map([["Y", 1]]), [], new Set()).missing).toBe(r.missing);
    // Counting still starts a map of its own.
    expect([...goneIntents(none, ["Z"], new Set()).missing]).toEqual([["Z", 1]]);
  });
});
