/**
 * A node's credentials reach only its node, over real mutual TLS: a
 * coordinator process and two agent processes (gpu-1, gpu-2) with
 * certificates from `warden certs` and node tokens, auth on. Holding gpu-1's
 * own certificate and token, an attacker stops gpu-1's agent, registers gpu-1
 * at gpu-2's agent address, heartbeats an empty inventory and loads a model
 * on gpu-1; and, once gpu-1 registered honestly, hands gpu-1's address to
 * gpu-2's agent (a TCP relay) under the coordinator's cached channel. Neither
 * starts anything on gpu-2, and gpu-2's own heartbeats keep being accepted.
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, connect as netConnect, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "@warden/common";
import { clientTlsOf, createClient, readTlsMaterial, type Client, type ClientTls } from "@warden/grpc";
import { AdminService, InstanceState, NodeService, NodeState } from "@warden/proto";
import { certsInit } from "../services/cli/src/certs.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { liveRemoteAgents, startRemoteAgent, writeAgentConfig, type RemoteAgent } from "./support/agent-process.js";
import { uniqueTag } from "./support/agent-harness.js";
import { simModel, until } from "./support/coordinator-harness.js";
import { withToken, writeTokensFile } from "./support/auth-tokens.js";
import { refusedWith } from "./support/refusal.js";

const tag = uniqueTag("dial-identity");

/** A TCP relay whose target can change: what whoever holds an address can do with it. */
async function relay(): Promise<{ address: string; readonly acceptedSinceSwitch: number; switchTo(target: string): void; close(): Promise<void> }> {
  const open = new Set<Socket>();
  const state: { target: string | undefined; accepted: number } = { target: undefined, accepted: 0 };
  const server: Server = createServer((down) => {
    state.accepted++;
    const to = state.target;
    if (to === undefined) {
      down.destroy();
      return;
    }
    const colon = to.lastIndexOf(":");
    const up = netConnect({ host: to.slice(0, colon), port: Number(to.slice(colon + 1)) });
    for (const s of [down, up]) {
      open.add(s);
      s.on("error", () => {
        down.destroy();
        up.destroy();
      });
      s.on("close", () => {
        open.delete(s);
        down.destroy();
        up.destroy();
      });
    }
    down.pipe(up);
    up.pipe(down);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const a = server.address();
  const address = typeof a === "object" && a !== null ? `127.0.0.1:${String(a.port)}` : "";
  return {
    address,
    get acceptedSinceSwitch() {
      return state.accepted;
    },
    switchTo(target) {
      state.target = target;
      state.accepted = 0;
      // The address changes hands: connections made before go down with it.
      for (const s of open) s.destroy();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of open) s.destroy();
        server.close(() => {
          resolve();
        });
      }),
  };
}

describe("a node's credentials reach only its node (mutual TLS, real processes)", () => {
  let dir = "";
  let certs = "";
  let tokens: Record<"admin" | "gpu1" | "gpu2", string>;
  let coord: CoordinatorProcess;
  let gpu1: RemoteAgent;
  let gpu2: RemoteAgent;
  let admin: Client<typeof AdminService>;
  const tlsOf = (name: string): ClientTls => clientTlsOf(readTlsMaterial({ certFile: join(certs, `${name}.pem`), keyFile: join(certs, `${name}-key.pem`), caFile: join(certs, "ca.pem") }));
  const agentTls = (name: string): Record<string, string> => ({ cert: join(certs, `${name}.pem`), key: join(certs, `${name}-key.pem`), ca: join(certs, "ca.pem") });
  const node = async (id: string) => (await admin.listNodes({}, { timeoutMs: 20_000 })).nodes.find((n) => n.nodeId === id);
  const heartbeatMs = async (id: string): Promise<number> => {
    const t = (await node(id))?.lastHeartbeatAt;
    return t === undefined ? 0 : Number(t.seconds) * 1000 + Math.floor(t.nanos / 1e6);
  };
  /**
   * The coordinator applied two more of gpu-2's heartbeats, and refused none since gpu-2's log
   * line `from` (the agent logs each failed call with its code; a slow answer on a loaded
   * machine, DEADLINE_EXCEEDED or UNAVAILABLE, is not a refusal).
   */
  const gpu2StillHeard = async (from: number): Promise<void> => {
    const t0 = await heartbeatMs("gpu-2");
    await until("gpu-2 heartbeats applied", async () => (await heartbeatMs("gpu-2")) > t0);
    const t1 = await heartbeatMs("gpu-2");
    await until("another gpu-2 heartbeat applied", async () => (await heartbeatMs("gpu-2")) > t1);
    expect((await node("gpu-2"))?.state).toBe(NodeState.READY);
    const refused = gpu2.proc.lines.slice(from).filter((l) => l.includes("coordinator call failed") && !/"code":(4|14)\b/.test(l));
    expect(refused).toEqual([]);
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-dial-id-"));
    certs = join(dir, "certs");
    await certsInit({ out: certs, agents: ["gpu-1", "gpu-2"] });
    const t = await writeTokensFile(dir, { admin: { role: "admin" }, gpu1: { role: "node", node: "gpu-1" }, gpu2: { role: "node", node: "gpu-2" } });
    tokens = t.tokens;
    await writeFile(join(dir, "gpu-1.token"), `${tokens.gpu1}\n`, { mode: 0o600 });
    await writeFile(join(dir, "gpu-2.token"), `${tokens.gpu2}\n`, { mode: 0o600 });
    coord = await startCoordinatorProcess(join(dir, "coordinator.yaml"), {
      listen: "127.0.0.1:0",
      stateDir: join(dir, "state"),
      embeddedAgent: false,
      recoveryWindow: 0,
      tls: agentTls("coordinator"),
      auth: { tokensFile: t.path },
      policy: { tickInterval: "100ms" },
      models: [simModel("chat-large"), simModel("chat-small"), simModel("chat-medium")],
    });
    admin = createClient(AdminService, coord.address, { tls: tlsOf("admin"), ...withToken(tokens.admin) });
    const agentOf = (id: string, token: string): Promise<RemoteAgent> => startRemoteAgent({ coordinator: coord.address, nodeId: id, tag, config: { tls: agentTls(id), coordinatorTokenFile: join(dir, token) } });
    [gpu1, gpu2] = await Promise.all([agentOf("gpu-1", "gpu-1.token"), agentOf("gpu-2", "gpu-2.token")]);
    await until("gpu-1 and gpu-2 ready", async () => (await admin.listNodes({}, { timeoutMs: 20_000 })).nodes.filter((n) => n.state === NodeState.READY).length === 2, 60_000);
  }, 120_000);

  afterAll(async () => {
    admin.close();
    await Promise.all([gpu1.cleanup(), gpu2.cleanup()]);
    await coord.kill();
    await rm(dir, { recursive: true, force: true });
    expect(await liveRemoteAgents()).toEqual([]);
  });

  it("gpu-1's certificate and token cannot register gpu-2's agent address as gpu-1: nothing starts on gpu-2, its heartbeats still count", async () => {
    const before = await node("gpu-1");
    const from = gpu2.proc.lines.length;
    await gpu1.stop();
    const stolen = createClient(NodeService, coord.address, { tls: tlsOf("gpu-1"), ...withToken(tokens.gpu1) });
    try {
      const bootEpoch = BigInt(Date.now());
      const reg = await refusedWith(stolen.register({ nodeId: "gpu-1", address: gpu2.address, bootEpoch, version: "0", backends: ["backend-sim"] }, { timeoutMs: 20_000 }));
      expect(reg).toMatchObject({ code: Code.PermissionDenied, details: { field: "address" } });
      expect(reg.rawMessage).toMatch(/serves node "gpu-2"'s certificate/);
      // Refused whole: gpu-1 is where it was.
      const after = await node("gpu-1");
      expect(after?.address).toBe(before?.address);
      expect(after?.bootEpoch).toBe(before?.bootEpoch);
      // The rest of the attack, answered however the coordinator answers it.
      await stolen.heartbeat({ nodeId: "gpu-1", bootEpoch, sequence: 1n, backends: [] }, { timeoutMs: 20_000 }).catch(() => undefined);
      await refusedWith(admin.loadModel({ model: "chat-large", nodeId: "gpu-1" }, { timeoutMs: 60_000 }));
    } finally {
      stolen.close();
    }
    expect(await gpu2.liveBackends()).toEqual([]);
    expect((await admin.listModels({}, { timeoutMs: 20_000 })).instances.filter((i) => i.state === InstanceState.READY)).toEqual([]);
    await gpu2StillHeard(from);
  }, 120_000);

  it("when gpu-1's registered address comes to serve gpu-2's agent, the coordinator's next dial refuses it by certificate: nothing starts on gpu-2", async () => {
    // gpu-1 comes back honestly, reached through a relay at its advertised address.
    const r = await relay();
    try {
      const cfg = JSON.parse(await readFile(gpu1.configPath, "utf8")) as Record<string, unknown>;
      await writeAgentConfig(gpu1.configPath, { ...cfg, advertiseAddress: r.address });
      await gpu1.restart();
      r.switchTo(gpu1.address);
      await until("gpu-1 ready at the relay", async () => {
        const n = await node("gpu-1");
        return n?.state === NodeState.READY && n.address === r.address;
      }, 60_000);
      // A load on gpu-1 opens (and caches) the coordinator's channel to that address.
      const small = await admin.loadModel({ model: "chat-small", nodeId: "gpu-1" }, { timeoutMs: 60_000 });
      expect(small.instance?.nodeId).toBe("gpu-1");
      expect(await gpu1.liveBackends()).toHaveLength(1);

      const from = gpu2.proc.lines.length;
      r.switchTo(gpu2.address);
      // The coordinator has seen its connection go (it dialled the address again, re-opening its
      // WatchBackends stream): the load below cannot race the old connection's end.
      await until("the coordinator dials gpu-1's address again", () => r.acceptedSinceSwitch > 0);
      // (chat-large is in its load-failure cooldown after the first attack.)
      const e = await refusedWith(admin.loadModel({ model: "chat-medium", nodeId: "gpu-1" }, { timeoutMs: 60_000 }));
      expect(e.code, e.message).toBe(Code.PermissionDenied);
      expect(e.rawMessage).toMatch(/node "gpu-1".*issued to node "gpu-2"/);
      expect(await gpu2.liveBackends()).toEqual([]);
      await gpu2StillHeard(from);
    } finally {
      await r.close();
    }
  }, 180_000);
});
