/**
 * Delta heartbeats at the NodeService boundary, over real loopback gRPC to a
 * real coordinator: a delta is applied only onto the inventory it is against
 * and only when the result has its digest; otherwise nothing changes and the
 * answer asks for a full inventory, which is then applied. A stale delta
 * never applies. Malformed deltas are INVALID_ARGUMENT naming the field and
 * change nothing.
 */
import { afterEach, describe, expect, it } from "vitest";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { createClient, type Client } from "@warden/grpc";
import { Code } from "@warden/common";
import { BackendState, InventoryEntrySchema, NodeService, inventoryDigest, type HeartbeatRequestSchema, type InventoryDeltaSchema, type InventoryEntry } from "@warden/proto";
import { simModel, startTestCoordinator, type TestCoordinator } from "./support/coordinator-harness.js";
import { refusal } from "./support/refusal.js";

let t: TestCoordinator | undefined;
let node: Client<typeof NodeService> | undefined;

afterEach(async () => {
  node?.close();
  node = undefined;
  await t?.close();
  t = undefined;
});

const bootEpoch = 1_750_000_000_000n;
type HeartbeatInit = MessageInitShape<typeof HeartbeatRequestSchema>;
// LOADING: a start in progress elsewhere is stored and accounted, never adopted (nothing is dialled).
const entry = (n: number, state = BackendState.LOADING): InventoryEntry => create(InventoryEntrySchema, { incarnation: `01JZ00000000000000000000${String(n).padStart(2, "0")}`, model: "m", address: `127.0.0.1:${String(1 + n)}`, state });

async function start(): Promise<{ tc: TestCoordinator; nc: Client<typeof NodeService> }> {
  t = await startTestCoordinator({ models: [simModel("m")] });
  node = createClient(NodeService, t.c.address);
  await node.register({ nodeId: "n1", address: "127.0.0.1:1", bootEpoch });
  return { tc: t, nc: node };
}

const stored = (tc: TestCoordinator) => {
  const r = tc.c.nodes.get("n1");
  return { sequence: r?.sequence, inventory: (r?.inventory ?? []).map((e) => `${e.incarnation.slice(-2)}:${String(e.state)}`).sort() };
};
const hb = (sequence: bigint, rest: { readonly backends?: InventoryEntry[]; readonly delta?: MessageInitShape<typeof InventoryDeltaSchema> }): HeartbeatInit => ({ nodeId: "n1", bootEpoch, sequence, ...rest });

describe("delta heartbeats", () => {
  it("a delta onto the held base applies; a digest mismatch or another base changes nothing and asks for a full inventory, which applies; a stale delta is ignored", async () => {
    const { tc, nc } = await start();
    expect(await nc.heartbeat(hb(1n, { backends: [entry(1), entry(2)] }))).toMatchObject({ registerRequired: false, fullInventoryRequired: false });
    expect(stored(tc)).toEqual({ sequence: 1n, inventory: ["01:2", "02:2"] });

    // Entry 2 is now ready, entry 3 loads, entry 1 is gone.
    const next = [entry(2, BackendState.READY), entry(3)];
    expect(await nc.heartbeat(hb(2n, { delta: { baseSequence: 1n, upserts: next, removed: [entry(1).incarnation], digest: inventoryDigest(next) } }))).toMatchObject({ fullInventoryRequired: false });
    expect(stored(tc)).toEqual({ sequence: 2n, inventory: ["02:3", "03:2"] });

    // The agent's view drifted (it believes entry 3 is ready): the digest differs.
    const drifted = await nc.heartbeat(hb(3n, { delta: { baseSequence: 2n, upserts: [], removed: [], digest: inventoryDigest([entry(2, BackendState.READY), entry(3, BackendState.READY)]) } }));
    expect(drifted).toMatchObject({ registerRequired: false, fullInventoryRequired: true });
    expect(stored(tc)).toEqual({ sequence: 2n, inventory: ["02:3", "03:2"] });
    // Against a base the coordinator does not hold (sequence 1 was replaced by 2).
    const otherBase = await nc.heartbeat(hb(4n, { delta: { baseSequence: 1n, upserts: [], removed: [], digest: inventoryDigest(next) } }));
    expect(otherBase).toMatchObject({ fullInventoryRequired: true });
    expect(stored(tc)).toEqual({ sequence: 2n, inventory: ["02:3", "03:2"] });

    // The full inventory the answer asked for applies.
    const now = [entry(2, BackendState.READY), entry(3, BackendState.READY)];
    expect(await nc.heartbeat(hb(5n, { backends: now }))).toMatchObject({ fullInventoryRequired: false });
    expect(stored(tc)).toEqual({ sequence: 5n, inventory: ["02:3", "03:3"] });
    expect(await nc.heartbeat(hb(6n, { delta: { baseSequence: 5n, upserts: [], removed: [entry(3).incarnation], digest: inventoryDigest([now[0] as InventoryEntry]) } }))).toMatchObject({ fullInventoryRequired: false });
    expect(stored(tc)).toEqual({ sequence: 6n, inventory: ["02:3"] });

    // Reordered: an older delta arriving late is stale, whatever its base and digest.
    expect(await nc.heartbeat(hb(4n, { delta: { baseSequence: 2n, upserts: [entry(7)], removed: [], digest: inventoryDigest([...next, entry(7)]) } }))).toMatchObject({ fullInventoryRequired: false });
    expect(stored(tc)).toEqual({ sequence: 6n, inventory: ["02:3"] });
  });

  it("after the agent restarts (a new boot epoch) a delta is never applied onto the old boot's inventory", async () => {
    const { tc, nc } = await start();
    await nc.heartbeat(hb(1n, { backends: [entry(1)] }));
    const reboot = bootEpoch + 1n;
    expect(await nc.heartbeat({ nodeId: "n1", bootEpoch: reboot, sequence: 2n, delta: { baseSequence: 1n, upserts: [], removed: [], digest: inventoryDigest([entry(1)]) } })).toMatchObject({ registerRequired: true });
    await nc.register({ nodeId: "n1", address: "127.0.0.1:1", bootEpoch: reboot });
    expect(await nc.heartbeat({ nodeId: "n1", bootEpoch: reboot, sequence: 2n, delta: { baseSequence: 1n, upserts: [], removed: [], digest: inventoryDigest([entry(1)]) } })).toMatchObject({ fullInventoryRequired: true });
    expect(tc.c.nodes.get("n1")?.inventory).toBeUndefined();
  });

  it("malformed deltas are INVALID_ARGUMENT naming the field, and change nothing", async () => {
    const { tc, nc } = await start();
    await nc.heartbeat(hb(1n, { backends: [entry(1)] }));
    const before = stored(tc);
    const digest = inventoryDigest([entry(1)]);
    const cases: [HeartbeatInit, string][] = [
      [hb(2n, { backends: [entry(1)], delta: { baseSequence: 1n, digest } }), "backends"],
      [hb(2n, { delta: { baseSequence: 2n, digest } }), "delta.base_sequence"],
      [hb(2n, { delta: { baseSequence: 1n, removed: [entry(1).incarnation, entry(1).incarnation], digest } }), "delta.removed[1]"],
      [hb(2n, { delta: { baseSequence: 1n, upserts: [entry(2)], removed: [entry(2).incarnation], digest } }), "delta.removed[0]"],
      [hb(2n, { delta: { baseSequence: 1n, removed: ["not an id!"], digest } }), "delta.removed[0]"],
      [hb(2n, { delta: { baseSequence: 1n, upserts: [{ ...entry(2), address: "nowhere" }], digest } }), "delta.upserts[0].address"],
      [hb(2n, { delta: { baseSequence: 1n, upserts: [entry(2), entry(2)], digest } }), "delta.upserts[1].incarnation"],
    ];
    for (const [req, field] of cases) expect(await refusal(nc.heartbeat(req))).toMatchObject({ code: Code.InvalidArgument, field });
    const over = await refusal(nc.heartbeat(hb(2n, { delta: { baseSequence: 1n, removed: Array.from({ length: 4097 }, (_, i) => `01JZ${String(i).padStart(22, "0")}`), digest } })));
    expect(over).toMatchObject({ code: Code.ResourceExhausted, field: "delta.removed" });
    expect(stored(tc)).toEqual(before);
  });
});
