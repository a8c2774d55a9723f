/**
 * A whole cluster of real processes for the chaos tests: a private
 * nats-server (JetStream, temp store), a coordinator process (restartable on
 * the same address and state dir after kill -9), and agent processes that
 * register with it, each spawning tagged backend-sim processes. `close`
 * removes every process it started (and only those) and every temp dir.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, InferenceService, NodeState } from "@warden/proto";
import { uniqueTag } from "./agent-harness.js";
import { startRemoteAgent, type RemoteAgent } from "./agent-process.js";
import { until } from "./coordinator-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess, type LoggedEvent } from "./coordinator-process.js";
import { freePort } from "./free-port.js";
import { startNatsServer, type NatsServerHandle } from "./nats-server.js";

export interface ChaosCluster {
  readonly nats: NatsServerHandle;
  /** Tag prefix of every backend this cluster's agents start. */
  readonly tag: string;
  /** The current coordinator process. */
  readonly coord: CoordinatorProcess;
  /** Admin client of the current coordinator. */
  readonly admin: Client<typeof AdminService>;
  /** Inference client of the current coordinator. */
  readonly inference: Client<typeof InferenceService>;
  /** Every event logged by every coordinator process of this cluster so far. */
  logged(): LoggedEvent[];
  /** SIGKILL of the current coordinator, then a new one on the same address and state dir. */
  restartCoordinator(): Promise<void>;
  /** Starts an agent process for `nodeId` and waits until the coordinator lists it ready. */
  addAgent(nodeId: string, config?: Record<string, unknown>): Promise<RemoteAgent>;
  close(): Promise<void>;
}

export interface ChaosClusterOptions {
  /** Test-file name, the prefix of the tag. */
  readonly name: string;
  readonly models: Record<string, unknown>[];
  /** Merged over the coordinator config defaults below. */
  readonly config?: Record<string, unknown>;
}

export async function startChaosCluster(o: ChaosClusterOptions): Promise<ChaosCluster> {
  const tag = uniqueTag(o.name);
  const dir = await mkdtemp(join(tmpdir(), `warden-${o.name}-`));
  const nats = await startNatsServer();
  const address = `127.0.0.1:${String(await freePort())}`;
  const config = {
    listen: address,
    stateDir: join(dir, "state"),
    embeddedAgent: false,
    // Loads that wait for a leftover to be reaped must not run out of attempts.
    policy: { tickInterval: "100ms", enforcementRetries: 600, enforcementRetryInterval: "250ms" },
    // ... nor out of loadWait: a load blocked by a stopping leftover is "not now".
    loadWait: "150s",
    stop: { timeout: "10s", rpcTimeout: "2s" },
    recoveryWindow: "500ms",
    nodeGrace: "120s",
    nats: { url: nats.url },
    models: o.models,
    ...o.config,
  };
  const retired: LoggedEvent[] = [];
  const agents: RemoteAgent[] = [];
  let n = 0;
  const launch = async (): Promise<{ coord: CoordinatorProcess; admin: Client<typeof AdminService>; inference: Client<typeof InferenceService> }> => {
    const c = await startCoordinatorProcess(join(dir, `coordinator-${String(n++)}.yaml`), config);
    return { coord: c, admin: createClient(AdminService, c.address), inference: createClient(InferenceService, c.address) };
  };
  let cur = await launch();
  return {
    nats,
    tag,
    get coord() {
      return cur.coord;
    },
    get admin() {
      return cur.admin;
    },
    get inference() {
      return cur.inference;
    },
    logged: () => [...retired, ...cur.coord.events],
    async restartCoordinator() {
      await cur.coord.kill();
      cur.admin.close();
      cur.inference.close();
      retired.push(...cur.coord.events);
      cur = await launch();
    },
    async addAgent(nodeId, agentConfig) {
      const a = await startRemoteAgent({ coordinator: address, nodeId, tag, ...(agentConfig === undefined ? {} : { config: agentConfig }) });
      agents.push(a);
      await until(`${nodeId} ready`, async () => (await cur.admin.listNodes({})).nodes.some((x) => x.nodeId === nodeId && x.state === NodeState.READY), 60_000);
      return a;
    },
    async close() {
      cur.admin.close();
      cur.inference.close();
      for (const a of agents) await a.cleanup();
      await cur.coord.kill();
      await nats.dispose();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
