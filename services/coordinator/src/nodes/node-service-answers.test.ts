import { describe, expect, it } from "vitest";
import { create, toBinary } from "@bufbuild/protobuf";
import { HeartbeatRequestSchema, HeartbeatResponseSchema, RegisterRequestSchema, type AgentService, type HeartbeatResponse } from "@warden/proto";
import { ManualClock, nullLogger } from "@warden/common";
import { encodingOf, type Client, type HandlerContext } from "@warden/grpc";
import { NodeRegistry } from "./node-registry.js";
import { nodeService } from "./node-service.js";
import { idleWatchBackends } from "../test-kit/idle-watch.fixture.js";

const ctx = { peer: "127.0.0.1:5000", signal: new AbortController().signal } as HandlerContext;

/** A NodeService over a real NodeRegistry whose leader epoch the test moves. */
function setup() {
  const clock = new ManualClock();
  const registry = new NodeRegistry({
    clock,
    log: nullLogger,
    graceMs: 5_000,
    lostAfterMs: 60_000,
    connect: () => ({ close() {}, watchBackends: idleWatchBackends }) as unknown as Client<typeof AgentService>,
    onNodeEvent: () => undefined,
    onPauseChange: () => undefined,
  });
  let epoch = 3n;
  const svc = nodeService(registry, clock, 42n, { ha: { leaderEpoch: () => epoch, onSuperseded: () => undefined } });
  return { svc, setEpoch: (e: bigint) => (epoch = e) };
}

const beat = (nodeId: string, sequence: bigint) => create(HeartbeatRequestSchema, { nodeId, bootEpoch: 1n, sequence });

/** The bytes the server sends for an answer: those made with it, else a fresh encoding. */
function sent(answer: unknown): Uint8Array {
  return encodingOf(answer) ?? toBinary(HeartbeatResponseSchema, create(HeartbeatResponseSchema, answer as HeartbeatResponse));
}

describe("NodeService heartbeat answers", () => {
  it("sends each kind of answer encoded once, with the fields it stands for, and makes it anew when the leader epoch moves", async () => {
    const { svc, setEpoch } = setup();
    await svc.register(create(RegisterRequestSchema, { nodeId: "a", address: "127.0.0.1:7001", bootEpoch: 1n }), ctx);
    const ok1 = await svc.heartbeat(beat("a", 1n), ctx);
    const ok2 = await svc.heartbeat(beat("a", 2n), ctx);
    const expected = create(HeartbeatResponseSchema, { coordinatorEpoch: 42n, leaderEpoch: 3n });
    expect(encodingOf(ok1)).toBeDefined();
    expect(ok2).toBe(ok1);
    expect(Buffer.from(sent(ok2))).toEqual(Buffer.from(toBinary(HeartbeatResponseSchema, expected)));
    expect(Object.isFrozen(ok1)).toBe(true);

    // A stranger is told to register; the usual answer is unchanged by it.
    const stranger = await svc.heartbeat(beat("b", 1n), ctx);
    expect(stranger).toMatchObject({ registerRequired: true, coordinatorEpoch: 42n, leaderEpoch: 3n, fullInventoryRequired: false });
    expect(await svc.heartbeat(beat("a", 3n), ctx)).toBe(ok1);

    // A new term: the answer carries the new epoch, in its fields and its bytes.
    setEpoch(4n);
    const ok3 = await svc.heartbeat(beat("a", 4n), ctx);
    expect(ok3).not.toBe(ok1);
    expect(ok3).toMatchObject({ registerRequired: false, leaderEpoch: 4n });
    expect(Buffer.from(sent(ok3))).toEqual(Buffer.from(toBinary(HeartbeatResponseSchema, create(HeartbeatResponseSchema, { coordinatorEpoch: 42n, leaderEpoch: 4n }))));
  });
});
