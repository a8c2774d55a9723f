/**
 * A rejected Register or Heartbeat changes nothing: hostile reports sent over
 * real loopback gRPC to a real coordinator (with its embedded agent) are
 * refused whole, naming the field, and ListNodes, ListModels, the node record
 * and the event stream are exactly as before. Many new orphans make one
 * coalesced orphan.adopted event; only the embedded agent, in process, may be
 * `in-process` or speak for the embedded node.
 */
import { afterEach, describe, expect, it } from "vitest";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { createClient, type Client } from "@warden/grpc";
import { Code } from "@warden/common";
import { eventTypeOf } from "@warden/events";
import { BackendState, GpuInfoSchema, NodeService, OrphanProcessSchema, type HeartbeatRequestSchema, type RegisterRequestSchema } from "@warden/proto";
import { nodeReportLimits } from "@warden/coordinator";
import { simModel, startTestCoordinator, type TestCoordinator } from "./support/coordinator-harness.js";
import { refusal } from "./support/refusal.js";
import { listAllModels } from "../services/cli/src/list-pages.js";

let t: TestCoordinator | undefined;
let node: Client<typeof NodeService> | undefined;

afterEach(async () => {
  node?.close();
  node = undefined;
  await t?.close();
  t = undefined;
});

const bootEpoch = 1_750_000_000_000n;
// Nothing listens on port 1: the coordinator's WatchBackends to this node just fails and retries.
const hostileAddress = "127.0.0.1:1";

type RegisterInit = MessageInitShape<typeof RegisterRequestSchema>;
type HeartbeatInit = MessageInitShape<typeof HeartbeatRequestSchema>;

const gpus = (n: number) => Array.from({ length: n }, (_, i) => create(GpuInfoSchema, { index: i, name: `gpu${String(i)}`, totalBytes: 80n << 30n }));
const orphans = (from: number, n: number) => Array.from({ length: n }, (_, i) => create(OrphanProcessSchema, { pid: from + i }));

async function start(): Promise<{ tc: TestCoordinator; nc: Client<typeof NodeService> }> {
  t = await startTestCoordinator({ models: [simModel("m")], extra: { orphanGrace: "1h" } });
  node = createClient(NodeService, t.c.address);
  return { tc: t, nc: node };
}

/** Everything a remote report could change, as seen over the API and in the registry. */
async function snapshot(tc: TestCoordinator) {
  const nodes = (await tc.admin.listNodes({})).nodes
    .filter((n) => !n.embedded)
    .map((n) => ({ id: n.nodeId, address: n.address, labels: n.labels, backends: n.backends, state: n.state, bootEpoch: n.bootEpoch, gpus: n.resources?.gpus.length, at: n.lastHeartbeatAt?.seconds, atNanos: n.lastHeartbeatAt?.nanos }));
  const models = (await tc.admin.listModels({})).instances.map((i) => ({ node: i.nodeId, model: i.model, state: i.state, address: i.address, incarnation: i.incarnation }));
  const rec = tc.c.nodes.get("hostile");
  const events = tc.events.filter((e) => e.nodeId !== "local").map((e) => `${eventTypeOf(e)} ${e.nodeId}`);
  return {
    nodes,
    models,
    events,
    record: rec === undefined ? undefined : { sequence: rec.sequence, gpus: rec.gpus.length, labels: { ...rec.labels }, orphans: rec.orphans.length, inventory: rec.inventory?.length, address: rec.address, backends: [...rec.backends] },
    known: tc.c.nodes.list().map((n) => n.nodeId),
  };
}

async function registerHostile(tc: TestCoordinator, nc: Client<typeof NodeService>): Promise<void> {
  const reg: RegisterInit = { nodeId: "hostile", address: hostileAddress, labels: { zone: "z1" }, gpus: gpus(2), bootEpoch };
  await nc.register(reg);
  const hb: HeartbeatInit = { nodeId: "hostile", bootEpoch, sequence: 1n, orphans: orphans(4242, 1), resources: { gpus: gpus(2) } };
  expect(await nc.heartbeat(hb)).toMatchObject({ registerRequired: false });
  await tc.waitForEvent("orphan.adopted", (e) => e.nodeId === "hostile");
}

describe("node reports are validated whole", () => {
  it("a heartbeat with 150 000 orphans or over the orphan cap (RESOURCE_EXHAUSTED), 100 GPUs or a bad inventory entry (INVALID_ARGUMENT) is refused naming the field, and changes nothing", async () => {
    const { tc, nc } = await start();
    await registerHostile(tc, nc);
    const before = await snapshot(tc);
    expect(before.models.filter((m) => m.node === "hostile")).toHaveLength(1); // the baseline orphan
    expect(before.record).toMatchObject({ sequence: 1n, orphans: 1, gpus: 2 });

    // 150 000 entries are refused before decoding (the request element budget); one over the orphan cap by the cap.
    const flood = await refusal(nc.heartbeat({ nodeId: "hostile", bootEpoch, sequence: 2n, orphans: orphans(10_000, 150_000) }, { timeoutMs: 60_000 }));
    expect(flood).toMatchObject({ code: Code.ResourceExhausted, field: "request" });
    const overCap = await refusal(nc.heartbeat({ nodeId: "hostile", bootEpoch, sequence: 2n, orphans: orphans(10_000, nodeReportLimits.maxOrphans + 1) }));
    expect(overCap).toMatchObject({ code: Code.ResourceExhausted, field: "orphans" });
    expect(overCap.message).toContain(`at most ${String(nodeReportLimits.maxOrphans)}`);

    const manyGpus = await refusal(nc.heartbeat({ nodeId: "hostile", bootEpoch, sequence: 3n, orphans: orphans(20_000, 3), resources: { gpus: gpus(100) } }));
    expect(manyGpus).toMatchObject({ code: Code.InvalidArgument, field: "resources.gpus" });

    const badEntry = await refusal(
      nc.heartbeat({
        nodeId: "hostile",
        bootEpoch,
        sequence: 4n,
        orphans: orphans(30_000, 3),
        backends: [
          { incarnation: "01JZ0000000000000000000001", model: "m", address: "127.0.0.1:7001", state: BackendState.READY },
          // eslint-disable-next-line @typescript-eslint/no-unsafe-enum-assignment -- outside the enum, as a hostile peer can put on the wire
          { incarnation: "01JZ0000000000000000000002", model: "m", address: "127.0.0.1:7002", state: 42 as BackendState },
        ],
      }),
    );
    expect(badEntry).toMatchObject({ code: Code.InvalidArgument, field: "backends[1].state" });
    const badBundle = await refusal(nc.heartbeat({ nodeId: "hostile", bootEpoch, sequence: 4n, orphans: orphans(30_000, 3), backends: [{ incarnation: "01JZ0000000000000000000001", model: "m", address: "127.0.0.1:7001", state: BackendState.READY, bundleDigest: "not-a-sha256" }] }));
    expect(badBundle).toMatchObject({ code: Code.InvalidArgument, field: "backends[0].bundle_digest" });

    const badForeign = await refusal(nc.heartbeat({ nodeId: "hostile", bootEpoch, sequence: 5n, orphans: orphans(40_000, 3), foreign: Array.from({ length: nodeReportLimits.maxForeign + 1 }, (_, i) => ({ pid: i + 1 })) }));
    expect(badForeign).toMatchObject({ code: Code.ResourceExhausted, field: "foreign" });

    // Anything these reports could have added would have been journaled and
    // delivered before the refusal returned; a later event proves the stream moved on without them.
    await nc.register({ nodeId: "marker", address: "127.0.0.1:2", bootEpoch });
    await tc.waitForEvent("node.registered", (e) => e.nodeId === "marker");
    const after = await snapshot(tc);
    expect({ ...after, nodes: after.nodes.filter((n) => n.id !== "marker"), events: after.events.slice(0, -1), known: after.known.filter((k) => k !== "marker") }).toEqual(before);
    expect(after.events.at(-1)).toBe("node.registered marker");
  });

  it("a Register with 100 GPUs, too many labels or an oversized label is INVALID_ARGUMENT naming the field, and changes nothing", async () => {
    const { tc, nc } = await start();
    await registerHostile(tc, nc);
    const before = await snapshot(tc);
    const base: RegisterInit = { nodeId: "hostile", address: hostileAddress, labels: { zone: "z1" }, gpus: gpus(2), bootEpoch };

    expect(await refusal(nc.register({ ...base, gpus: gpus(100) }))).toMatchObject({ code: Code.InvalidArgument, field: "gpus" });
    const manyLabels = Object.fromEntries(Array.from({ length: nodeReportLimits.maxLabels + 1 }, (_, i) => [`k${String(i)}`, "v"]));
    expect(await refusal(nc.register({ ...base, labels: manyLabels }))).toMatchObject({ code: Code.InvalidArgument, field: "labels" });
    expect(await refusal(nc.register({ ...base, labels: { zone: "x".repeat(nodeReportLimits.maxLabelValueChars + 1) } }))).toMatchObject({ code: Code.InvalidArgument, field: 'labels["zone"]' });
    expect(await refusal(nc.register({ ...base, labels: { ["k".repeat(nodeReportLimits.maxLabelKeyChars + 1)]: "v" } }))).toMatchObject({ code: Code.InvalidArgument, field: "labels" });
    expect(await refusal(nc.register({ ...base, labels: { "bad key": "v" } }))).toMatchObject({ code: Code.InvalidArgument, field: "labels" });
    // a new node id too: nothing is registered
    expect(await refusal(nc.register({ ...base, nodeId: "hostile-2", gpus: gpus(100) }))).toMatchObject({ code: Code.InvalidArgument, field: "gpus" });

    await nc.register({ nodeId: "marker", address: "127.0.0.1:2", bootEpoch });
    await tc.waitForEvent("node.registered", (e) => e.nodeId === "marker");
    const after = await snapshot(tc);
    expect({ ...after, nodes: after.nodes.filter((n) => n.id !== "marker"), events: after.events.slice(0, -1), known: after.known.filter((k) => k !== "marker") }).toEqual(before);
  });

  it("a Register with too many catalog backends, a bad or a duplicate name is INVALID_ARGUMENT naming the field, and changes nothing", async () => {
    const { tc, nc } = await start();
    const base: RegisterInit = { nodeId: "hostile", address: hostileAddress, labels: { zone: "z1" }, gpus: gpus(2), bootEpoch, backends: ["sim-a", "sim_b"] };
    await nc.register(base);
    await tc.waitForEvent("node.registered", (e) => e.nodeId === "hostile");
    expect((await tc.admin.getNode({ nodeId: "hostile" })).node?.backends).toEqual(["sim-a", "sim_b"]);
    const before = await snapshot(tc);

    const many = Array.from({ length: nodeReportLimits.maxCatalogBackends + 1 }, (_, i) => `b${String(i)}`);
    expect(await refusal(nc.register({ ...base, backends: many }))).toMatchObject({ code: Code.InvalidArgument, field: "backends" });
    expect(await refusal(nc.register({ ...base, backends: ["sim-a", "-leading-dash"] }))).toMatchObject({ code: Code.InvalidArgument, field: "backends[1]" });
    expect(await refusal(nc.register({ ...base, backends: ["sim-a", "x".repeat(129)] }))).toMatchObject({ code: Code.InvalidArgument, field: "backends[1]" });
    expect(await refusal(nc.register({ ...base, backends: ["sim-a", "sim a"] }))).toMatchObject({ code: Code.InvalidArgument, field: "backends[1]" });
    expect(await refusal(nc.register({ ...base, backends: ["sim-a", "sim-a"] }))).toMatchObject({ code: Code.InvalidArgument, field: "backends[1]" });
    // backend bundle digests: a bounded map of catalog names to sha256s
    const manyBundles = Object.fromEntries(many.map((n) => [n, "a".repeat(64)]));
    expect(await refusal(nc.register({ ...base, backendBundles: manyBundles }))).toMatchObject({ code: Code.InvalidArgument, field: "backend_bundles" });
    expect(await refusal(nc.register({ ...base, backendBundles: { "sim-a": "A".repeat(64) } }))).toMatchObject({ code: Code.InvalidArgument, field: 'backend_bundles["sim-a"]' });
    expect(await refusal(nc.register({ ...base, backendBundles: { "sim a": "a".repeat(64) } }))).toMatchObject({ code: Code.InvalidArgument, field: 'backend_bundles["sim a"]' });
    // the bound itself is accepted (on another node, so "hostile" stays as it was)
    const full = many.slice(0, nodeReportLimits.maxCatalogBackends);
    await nc.register({ ...base, nodeId: "marker", address: "127.0.0.1:2", backends: full });
    await tc.waitForEvent("node.registered", (e) => e.nodeId === "marker");
    expect((await tc.admin.getNode({ nodeId: "marker" })).node?.backends).toEqual([...full].sort());
    const after = await snapshot(tc);
    expect({ ...after, nodes: after.nodes.filter((n) => n.id !== "marker"), events: after.events.slice(0, -1), known: after.known.filter((k) => k !== "marker") }).toEqual(before);
  });

  it("many new orphans in one heartbeat make one coalesced orphan.adopted event (count, first pids)", async () => {
    const { tc, nc } = await start();
    await registerHostile(tc, nc);
    const n = nodeReportLimits.maxOrphans;
    // the baseline orphan stays; n − 1 new ones arrive at once
    await nc.heartbeat({ nodeId: "hostile", bootEpoch, sequence: 2n, orphans: [...orphans(4242, 1), ...orphans(50_000, n - 1)] });
    await nc.register({ nodeId: "marker", address: "127.0.0.1:2", bootEpoch });
    await tc.waitForEvent("node.registered", (e) => e.nodeId === "marker");
    const adopted = tc.events.filter((e) => e.nodeId === "hostile" && e.payload.case === "orphanAdopted");
    expect(adopted).toHaveLength(2); // the baseline one, then one for the whole batch
    const batch = adopted[1];
    expect(batch?.payload.case === "orphanAdopted" && batch.payload.value).toMatchObject({ pid: 50_000, count: n - 1, pids: Array.from({ length: nodeReportLimits.orphanEventPids }, (_, i) => 50_000 + i) });
    expect(batch?.incarnation).toBe("pid:50000");
    // all are accounted (ListModels answers a page at a time: every page read, as the CLI does)
    expect((await listAllModels(tc.admin, { nodeId: "hostile" }, undefined, () => 30_000)).instances).toHaveLength(n);
  });

  it("only the embedded agent may be in-process: a remote Register with address in-process, or any remote report for the embedded node, is refused", async () => {
    const { tc, nc } = await start();
    const before = await snapshot(tc);
    const local = tc.c.nodes.get("local");
    expect(local?.embedded).toBe(true);
    const localLabels = { ...local?.labels };

    expect(await refusal(nc.register({ nodeId: "sneaky", address: "in-process", bootEpoch }))).toMatchObject({ code: Code.InvalidArgument, field: "address" });
    expect(await refusal(nc.register({ nodeId: "local", address: "in-process", labels: { spoofed: "yes" }, bootEpoch: local?.bootEpoch ?? 0n }))).toMatchObject({ code: Code.InvalidArgument, field: "address" });
    expect(await refusal(nc.register({ nodeId: "local", address: hostileAddress, labels: { spoofed: "yes" }, bootEpoch: local?.bootEpoch ?? 0n }))).toMatchObject({ code: Code.PermissionDenied, field: "node_id" });
    expect(await refusal(nc.heartbeat({ nodeId: "local", bootEpoch: local?.bootEpoch ?? 0n, sequence: 1n << 40n, orphans: orphans(60_000, 5) }))).toMatchObject({ code: Code.PermissionDenied, field: "node_id" });

    expect(tc.c.nodes.get("sneaky")).toBeUndefined();
    expect(tc.c.nodes.get("local")?.labels).toEqual(localLabels);
    expect(tc.c.nodes.get("local")?.orphans.some((o) => o.pid >= 60_000)).toBe(false);
    const after = await snapshot(tc);
    expect(after.known).toEqual(before.known);
    expect(after.events).toEqual(before.events);
  });
});
