import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, WardenError } from "@warden/common";
import { GrpcServer, createClient } from "@warden/grpc";
import { NodeService, type HeartbeatRequest, type RegisterRequest, type HeartbeatResponseSchema } from "@warden/proto";
import { createNodeHeartbeat, inProcessNodeService, type NodeHeartbeat } from "../services/agent/src/index.js";
import { liveTaggedSims, randomPortRange, startAgentHarness, startReady, uniqueTag, waitFor, type AgentHarness } from "./support/agent-harness.js";

// The agent side of NodeService against a fake coordinator over real loopback
// gRPC: register, heartbeats with inventory and a strictly increasing sequence,
// re-register on register_required, retry while the coordinator is down.

interface FakeCoordinator {
  registers: RegisterRequest[];
  heartbeats: HeartbeatRequest[];
  /** Answer the next heartbeat with register_required. */
  forgetNode(): void;
  server: GrpcServer;
  address: string;
}

async function fakeCoordinator(listen: string, epoch: bigint): Promise<FakeCoordinator> {
  const registers: RegisterRequest[] = [];
  const heartbeats: HeartbeatRequest[] = [];
  const known = new Set<string>();
  const server = new GrpcServer();
  server.add(NodeService, {
    async register(req) {
      registers.push(req);
      known.add(req.nodeId);
      return { coordinatorEpoch: epoch, heartbeatIntervalMs: 0 };
    },
    async heartbeat(req): Promise<MessageInitShape<typeof HeartbeatResponseSchema>> {
      heartbeats.push(req);
      return { registerRequired: !known.has(req.nodeId), coordinatorEpoch: epoch };
    },
    // eslint-disable-next-line require-yield -- a coordinator without the stream
    async *heartbeatStream() {
      throw new WardenError(Code.Unimplemented, "no HeartbeatStream here");
    },
    // eslint-disable-next-line require-yield -- a coordinator without FindPeers
    async *findPeers() {
      throw new WardenError(Code.Unimplemented, "no FindPeers here");
    },
  });
  const { address } = await server.listen(listen);
  return { registers, heartbeats, server, address, forgetNode: () => { known.clear(); } };
}

const fileTag = uniqueTag("agent-hb");
let h: AgentHarness;
let hb: NodeHeartbeat | undefined;

beforeAll(async () => {
  h = await startAgentHarness({ tag: fileTag, ports: randomPortRange(5), config: { labels: { zone: "z1" } } });
});

afterAll(async () => {
  await hb?.stop();
  await h.close({ stopBackends: true });
  expect(await waitFor("no tagged backend-sim left", async () => (await liveTaggedSims(fileTag)).length === 0)).toBe(true);
});

function strictlyIncreasing(xs: readonly bigint[]): boolean {
  return xs.every((x, i) => i === 0 || x > (xs[i - 1] ?? 0n));
}

describe("node heartbeat", () => {
  it("registers, heartbeats the inventory with a strictly increasing sequence, re-registers and survives a coordinator restart", async () => {
    const backend = await startReady(h.client, "hb-model");
    const first = await fakeCoordinator("127.0.0.1:0", 1n);
    hb = createNodeHeartbeat({
      nodeId: "test-node",
      address: h.address,
      labels: h.config.labels,
      backends: Object.keys(h.config.catalog),
      source: h.agent,
      node: createClient(NodeService, first.address),
      intervalMs: 50,
      backoff: { initialMs: 20, factor: 1.5, maxMs: 200, jitter: 0.2 },
    });
    hb.start();
    await waitFor("three heartbeats", () => first.heartbeats.length >= 3);
    const reg = first.registers[0];
    expect(reg).toMatchObject({ nodeId: "test-node", address: h.address, labels: { zone: "z1" }, bootEpoch: BigInt(h.agent.bootEpochMs) });
    expect(reg?.ramTotalBytes).toBeGreaterThan(0n);
    expect(reg?.backends).toEqual(Object.keys(h.config.catalog));
    const beat = first.heartbeats[first.heartbeats.length - 1];
    expect(beat?.bootEpoch).toBe(BigInt(h.agent.bootEpochMs));
    // The first heartbeat after a Register carries the whole inventory; the next ones only the changes since (none).
    expect(first.heartbeats[0]?.backends.map((b) => b.incarnation)).toContain(backend.incarnation);
    expect(beat?.backends).toEqual([]);
    expect(beat?.delta).toMatchObject({ upserts: [], removed: [] });
    expect(beat?.resources?.ramTotalBytes).toBeGreaterThan(0n);

    first.forgetNode();
    await waitFor("re-registration", () => first.registers.length >= 2);
    const afterReRegister = first.heartbeats.length;
    await waitFor("heartbeats after re-registration", () => first.heartbeats.length >= afterReRegister + 2);
    // The first heartbeat that reached the coordinator after the new Register is full again.
    const reRegistered = first.heartbeats.slice(afterReRegister).find((x) => x.delta === undefined);
    expect(reRegistered?.backends.map((b) => b.incarnation)).toContain(backend.incarnation);
    expect(first.heartbeats[first.heartbeats.length - 1]?.bootEpoch).toBe(BigInt(h.agent.bootEpochMs));

    // coordinator down: failures counted, retried; back up on the same port: a new register
    const addr = first.address;
    await first.server.shutdown(200);
    const failuresBefore = hb.stats().failures;
    await waitFor("failed attempts while down", () => hb!.stats().failures > failuresBefore);
    const second = await fakeCoordinator(addr, 2n);
    await waitFor("registered with the restarted coordinator", () => second.registers.length >= 1 && second.heartbeats.length >= 2, 30_000);
    expect(hb.stats().coordinatorEpoch).toBe(2n);
    const seqs = [...first.heartbeats, ...second.heartbeats].map((x) => x.sequence);
    expect(strictlyIncreasing(seqs)).toBe(true);
    await hb.stop();
    hb = undefined;
    await second.server.shutdown(200);
    await h.client.stopBackend({ address: backend.address, incarnation: backend.incarnation });
  });

  it("reports an embedded agent through in-process NodeService handlers", async () => {
    const seen: HeartbeatRequest[] = [];
    const port = inProcessNodeService({
      async register() {
        return { coordinatorEpoch: 7n, heartbeatIntervalMs: 30 };
      },
      async heartbeat(req) {
        seen.push(req);
        return { registerRequired: false, coordinatorEpoch: 7n };
      },
    });
    const local = createNodeHeartbeat({ nodeId: "embedded", address: "", labels: {}, backends: [], source: h.agent, node: port, intervalMs: 10_000 });
    local.start();
    // the register answer's 30 ms interval overrides the configured 10 s
    await waitFor("in-process heartbeats", () => seen.length >= 3);
    await local.stop();
    expect(local.stats().registrations).toBe(1);
    expect(strictlyIncreasing(seen.map((s) => s.sequence))).toBe(true);
  });
});
