/**
 * Node identity, attacked over real gRPC on loopback: a coordinator with
 * auth on (no embedded agent) and a real agent process for node gpu-1 holding
 * its node token. A stranger cannot register and heartbeat a READY instance at
 * its own address to capture a prompt; a forged heartbeat for gpu-1 (sequence
 * 2^62, empty inventory) is refused and the real instance kept; another node
 * cannot report gpu-1's incarnation EXITED. Apart from auth: registrations
 * nobody vouches for (never a heartbeat) do not freeze node-loss handling.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, createUlidFactory, cryptoRng, systemClock } from "@warden/common";
import { GrpcServer, createClient, guardService, type Client } from "@warden/grpc";
import { AdminService, Backend, BackendState, InferenceService, InstanceState, NodeService, NodeState, type PredictOptions } from "@warden/proto";
import { createBackendSim, parseSimEnv } from "../services/backend-sim/src/index.js";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { withToken, writeTokensFile } from "./support/auth-tokens.js";
import { refusedWith } from "./support/refusal.js";

const tag = `auth-identity-${String(process.pid)}-${String(Date.now())}`;
const newIncarnation = createUlidFactory(systemClock, cryptoRng);

/** An attacker's backend: a real backend-sim served in this process, recording every prompt it is sent. */
async function capturingBackend(): Promise<{ address: string; prompts: string[]; close(): Promise<void> }> {
  const prompts: string[] = [];
  const sim = createBackendSim({ knobs: parseSimEnv({}), hooks: { exit() {}, setIgnoreSigterm() {} } });
  const server = new GrpcServer();
  server.add(
    Backend,
    guardService(Backend, sim.impl, (m, _ctx, req) => {
      if (m.name === "Predict" || m.name === "PredictStream") prompts.push((req as PredictOptions).Prompt);
    }),
  );
  const { address } = await server.listen("127.0.0.1:0");
  return { address, prompts, close: async () => { await server.shutdown(100); } };
}

describe("auth: node identity", () => {
  let tc: TestCoordinator;
  let dir: string;
  let tokens: Record<"admin" | "gpu1" | "gpu2", string>;
  let admin: Client<typeof AdminService>;
  let gpu1: RemoteAgent;
  let incarnation: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-auth-id-"));
    const t = await writeTokensFile(dir, { admin: { role: "admin" }, gpu1: { role: "node", node: "gpu-1" }, gpu2: { role: "node", node: "gpu-2" } });
    tokens = t.tokens;
    await writeFile(join(dir, "gpu-1.token"), `${tokens.gpu1}\n`, { mode: 0o600 });
    tc = await startTestCoordinator({ embeddedAgent: false, models: [simModel("small"), simModel("other")], extra: { auth: { tokensFile: t.path } } });
    admin = createClient(AdminService, tc.c.address, withToken(tokens.admin));
    gpu1 = await startRemoteAgent({ coordinator: tc.c.address, nodeId: "gpu-1", tag, config: { coordinatorTokenFile: join(dir, "gpu-1.token") } });
    await until("gpu-1 ready", async () => (await admin.listNodes({})).nodes.some((n) => n.nodeId === "gpu-1" && n.state === NodeState.READY));
    incarnation = (await admin.loadModel({ model: "small", nodeId: "gpu-1" })).instance?.incarnation ?? "";
    expect(incarnation).not.toBe("");
  }, 90_000);

  afterAll(async () => {
    admin.close();
    await gpu1.cleanup();
    await tc.close();
    await rm(dir, { recursive: true, force: true });
    expect(await liveRemoteAgents()).toEqual([]);
  });

  const smallReady = async (): Promise<boolean> => (await admin.listModels({})).instances.some((i) => i.incarnation === incarnation && i.nodeId === "gpu-1" && i.state === InstanceState.READY);

  it("a stranger cannot register as a new node and heartbeat a READY instance at its own address: the prompt never reaches it", async () => {
    const evil = await capturingBackend();
    const anonymous = createClient(NodeService, tc.c.address);
    const otherNode = createClient(NodeService, tc.c.address, withToken(tokens.gpu2));
    const inference = createClient(InferenceService, tc.c.address, withToken(tokens.admin));
    try {
      const claim = { nodeId: "evil", bootEpoch: 1n, sequence: 1n, backends: [{ incarnation: newIncarnation(), model: "other", address: evil.address, pid: 4242, state: BackendState.READY, backend: "backend-sim" }] };
      expect((await refusedWith(anonymous.register({ nodeId: "evil", address: evil.address, bootEpoch: 1n }))).code).toBe(Code.Unauthenticated);
      expect((await refusedWith(anonymous.heartbeat(claim))).code).toBe(Code.Unauthenticated);
      // Another node's token does not make its holder "evil" (or anyone but gpu-2).
      const bound = await refusedWith(otherNode.register({ nodeId: "evil", address: evil.address, bootEpoch: 1n }));
      expect(bound).toMatchObject({ code: Code.PermissionDenied, details: { field: "node_id" } });
      expect((await refusedWith(otherNode.heartbeat(claim))).code).toBe(Code.PermissionDenied);
      expect((await admin.listNodes({})).nodes.map((n) => n.nodeId)).toEqual(["gpu-1"]);

      const r = await inference.predict({ model: "other", options: { Prompt: "the secret prompt", Tokens: 2 } }, { timeoutMs: 60_000 });
      expect(r.nodeId).toBe("gpu-1");
      expect(evil.prompts).toEqual([]);
    } finally {
      anonymous.close();
      otherNode.close();
      inference.close();
      await evil.close();
    }
  }, 90_000);

  it("a forged heartbeat for gpu-1 with sequence 2^62 and an empty inventory is refused; the real instance stays and the real agent's heartbeats still apply", async () => {
    const bootEpoch = tc.c.nodes.get("gpu-1")?.bootEpoch ?? 0n;
    const forged = { nodeId: "gpu-1", bootEpoch, sequence: 2n ** 62n, backends: [] };
    const anonymous = createClient(NodeService, tc.c.address);
    const otherNode = createClient(NodeService, tc.c.address, withToken(tokens.gpu2));
    const stolen = createClient(NodeService, tc.c.address, withToken(tokens.gpu1));
    try {
      expect((await refusedWith(anonymous.heartbeat(forged))).code).toBe(Code.Unauthenticated);
      expect(await refusedWith(otherNode.heartbeat(forged))).toMatchObject({ code: Code.PermissionDenied, details: { field: "node_id" } });
      // Even gpu-1's own credential cannot jump the sequence out of bounds.
      expect(await refusedWith(stolen.heartbeat(forged))).toMatchObject({ code: Code.InvalidArgument, details: { field: "sequence" } });
    } finally {
      anonymous.close();
      otherNode.close();
      stolen.close();
    }
    expect(tc.c.nodes.get("gpu-1")?.sequence ?? 0n).toBeLessThan(2n ** 62n);
    const seen = tc.c.nodes.get("gpu-1")?.sequence ?? 0n;
    await until("two more real heartbeats applied", () => (tc.c.nodes.get("gpu-1")?.sequence ?? 0n) >= seen + 2n);
    expect(await smallReady()).toBe(true);
    expect(tc.c.loader.heldInstance(incarnation)?.nodeId).toBe("gpu-1");
  }, 60_000);

  it("another node reporting gpu-1's incarnation EXITED is refused naming the entry; the instance is kept", async () => {
    const gpu2 = createClient(NodeService, tc.c.address, withToken(tokens.gpu2));
    try {
      await gpu2.register({ nodeId: "gpu-2", address: "127.0.0.1:9", bootEpoch: 1n });
      const exited = { incarnation, model: "small", address: "127.0.0.1:9", pid: 1, state: BackendState.EXITED, backend: "backend-sim" };
      const e = await refusedWith(gpu2.heartbeat({ nodeId: "gpu-2", bootEpoch: 1n, sequence: 1n, backends: [{ ...exited, incarnation: newIncarnation(), state: BackendState.READY }, exited] }));
      expect(e).toMatchObject({ code: Code.PermissionDenied, details: { field: "backends[1].incarnation" } });
      // Refused whole: nothing of it was applied (no inventory yet, the other entry not adopted).
      expect(tc.c.nodes.get("gpu-2")?.inventory).toBeUndefined();
      expect(tc.c.loader.heldInstances().filter((h) => h.nodeId === "gpu-2")).toEqual([]);
      // Its own report goes through.
      expect((await gpu2.heartbeat({ nodeId: "gpu-2", bootEpoch: 1n, sequence: 2n, backends: [] })).registerRequired).toBe(false);
    } finally {
      gpu2.close();
    }
    const seen = tc.c.nodes.get("gpu-1")?.sequence ?? 0n;
    await until("two more gpu-1 heartbeats", () => (tc.c.nodes.get("gpu-1")?.sequence ?? 0n) >= seen + 2n);
    expect(await smallReady()).toBe(true);
    expect(tc.events.some((e) => e.incarnation === incarnation && e.payload.case === "backendExited")).toBe(false);
  }, 60_000);
});

describe("auth off: registrations nobody vouches for", () => {
  it("three junk registrations that never heartbeat do not pause node-loss handling: a silent real node is still declared lost", async () => {
    const tc = await startTestCoordinator({ embeddedAgent: false, models: [], extra: { nodeGrace: "1s", nodeLostAfter: "1s" } });
    const node = createClient(NodeService, tc.c.address);
    try {
      await node.register({ nodeId: "real", address: "127.0.0.1:9", bootEpoch: 1n });
      await node.heartbeat({ nodeId: "real", bootEpoch: 1n, sequence: 1n, backends: [] });
      for (const id of ["junk-1", "junk-2", "junk-3"]) await node.register({ nodeId: id, address: "127.0.0.1:9", bootEpoch: 1n });
      const lost = await tc.waitForEvent("node.lost", (e) => e.nodeId === "real");
      expect(lost.payload.case).toBe("nodeLost");
      expect(tc.events.some((e) => e.payload.case === "unreachabilityPaused" && e.payload.value.paused)).toBe(false);
    } finally {
      node.close();
      await tc.close();
    }
  }, 60_000);
});
