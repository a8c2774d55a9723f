import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError, notLeaderError } from "@warden/common";
import { GrpcServer } from "@warden/grpc";
import { NodeService } from "@warden/proto";
import { recordingLogger } from "../../../test/support/recording-logger.js";
import { coordinatorList } from "./coordinator-list.js";

/** A NodeService stand-in that either leads (answers) or is a standby (refuses naming `hint`). */
interface FakeCoordinator {
  address: string;
  mode: { lead: boolean; hint: string | undefined };
  registers: number;
  heartbeats: number;
}

const servers: GrpcServer[] = [];
async function fakeCoordinator(): Promise<FakeCoordinator> {
  const c: FakeCoordinator = { address: "", mode: { lead: false, hint: undefined }, registers: 0, heartbeats: 0 };
  const server = new GrpcServer();
  server.add(NodeService, {
    async register() {
      if (!c.mode.lead) throw notLeaderError(c.mode.hint);
      c.registers++;
      return { coordinatorEpoch: 7n, heartbeatIntervalMs: 0 };
    },
    async heartbeat() {
      if (!c.mode.lead) throw notLeaderError(c.mode.hint);
      c.heartbeats++;
      return { coordinatorEpoch: 7n, registerRequired: false };
    },
    async *heartbeatStream(requests) {
      for await (const _ of requests) {
        if (!c.mode.lead) throw notLeaderError(c.mode.hint);
        c.heartbeats++;
        yield { coordinatorEpoch: 7n, registerRequired: false };
      }
    },
    // eslint-disable-next-line require-yield -- not what this file tests
    async *findPeers() {
      throw new WardenError(Code.Unimplemented, "no FindPeers here");
    },
  });
  servers.push(server);
  c.address = (await server.listen("127.0.0.1:0")).address;
  return c;
}

let a: FakeCoordinator;
let b: FakeCoordinator;
beforeAll(async () => {
  a = await fakeCoordinator();
  b = await fakeCoordinator();
});
afterAll(async () => {
  await Promise.all(servers.map((s) => s.shutdown(0)));
});

const register = { nodeId: "n1", address: "127.0.0.1:1" };
const beat = { nodeId: "n1", sequence: 1n };

describe("coordinatorList (agent --coordinator a,b)", () => {
  it("registers with the leader a standby names, and asks to register again when the leader moves", async () => {
    const logger = recordingLogger();
    a.mode = { lead: false, hint: b.address };
    b.mode = { lead: true, hint: undefined };
    const node = coordinatorList({ addresses: [a.address, b.address], logger });
    await node.register(register, { timeoutMs: 30_000 });
    expect([a.registers, b.registers]).toEqual([0, 1]);
    expect(node.currentAddress()).toBe(b.address);
    expect((await node.heartbeat(beat, { timeoutMs: 30_000 })).registerRequired).toBe(false);
    expect(logger.matching("info", /following the coordinator leader/).map((l) => l.msg)).toEqual([`following the coordinator leader at ${b.address}`]);

    // Failover: b steps down naming a, a takes over (and has not heard of this node's registration at b).
    b.mode = { lead: false, hint: a.address };
    a.mode = { lead: true, hint: undefined };
    const r = await node.heartbeat(beat, { timeoutMs: 30_000 });
    expect(r.registerRequired).toBe(true);
    expect(a.heartbeats).toBe(1);
    await node.register(register, { timeoutMs: 30_000 });
    expect([a.registers, b.registers]).toEqual([1, 1]);
    expect((await node.heartbeat(beat, { timeoutMs: 30_000 })).registerRequired).toBe(false);
    expect(logger.matching("info", /following the coordinator leader/).map((l) => l.msg)).toEqual([`following the coordinator leader at ${b.address}`, `following the coordinator leader at ${a.address}`]);
    node.close();
  });
});
