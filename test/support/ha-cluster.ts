/**
 * A whole HA cluster of real processes: a private 3-server
 * nats-server JetStream cluster, two coordinator processes with `ha:` on
 * fixed loopback addresses (each can be killed, paused, resumed or started
 * again), and agent processes given both coordinator addresses. Who leads is
 * read from the coordinators themselves (AdminService.GetHaStatus), never
 * assumed. `close` removes every process it started (and only those) and
 * every temp dir.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, InferenceService, NodeState, type GetHaStatusResponse } from "@warden/proto";
import { repoRootPath } from "../../services/agent/src/backend-sim-catalog.js";
import { uniqueTag } from "./agent-harness.js";
import { startRemoteAgent, type RemoteAgent } from "./agent-process.js";
import { until } from "./coordinator-harness.js";
import type { LoggedEvent } from "./coordinator-process.js";
import { freePort } from "./free-port.js";
import { startNatsCluster, type NatsClusterHandle } from "./nats-cluster.js";

const coordinatorMain = fileURLToPath(new URL("../../services/coordinator/src/main.ts", import.meta.url));

/** One coordinator process slot: the same address, config and state dir across restarts. */
export interface HaCoordinator {
  readonly index: number;
  readonly address: string;
  readonly admin: Client<typeof AdminService>;
  readonly inference: Client<typeof InferenceService>;
  /** The current process's pid (0 when none runs). */
  pid(): number;
  running(): boolean;
  /** SIGKILL; resolves once it exited. */
  kill(): Promise<void>;
  /** SIGSTOP: it answers nothing, its timers do not fire. */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** Starts a new process in the slot (after kill). */
  start(): Promise<void>;
  /** Its GetHaStatus, or undefined when it does not answer within `timeoutMs`. */
  status(timeoutMs?: number): Promise<GetHaStatusResponse | undefined>;
  /** Every event every process of this slot logged. */
  readonly events: LoggedEvent[];
  readonly stderr: string[];
  /** The last 300 JSON log lines of this slot's processes, for failure messages. */
  readonly recentLines: string[];
}

export interface HaCluster {
  readonly nats: NatsClusterHandle;
  readonly tag: string;
  readonly coords: readonly HaCoordinator[];
  /** Both coordinator addresses, as agents and clients are given them. */
  readonly addresses: readonly string[];
  /**
   * Waits until exactly one running coordinator says it leads and every other
   * running, unpaused one names the same leader and epoch; returns it.
   */
  leader(timeoutMs?: number, except?: ReadonlySet<number>): Promise<{ readonly coord: HaCoordinator; readonly status: GetHaStatusResponse }>;
  /** Starts an agent given both addresses and waits until the leader lists it ready. */
  addAgent(nodeId: string, config?: Record<string, unknown>): Promise<RemoteAgent>;
  readonly agents: readonly RemoteAgent[];
  /** Every event every coordinator logged. */
  logged(): LoggedEvent[];
  close(): Promise<void>;
}

export interface HaClusterOptions {
  readonly name: string;
  readonly models: Record<string, unknown>[];
  /** Merged over the coordinator config defaults. */
  readonly config?: Record<string, unknown>;
  /** Merged over the `ha:` defaults (lease 3s, renew 1s, margin 500ms). */
  readonly ha?: Record<string, unknown>;
  /** More lines of every nats-server's config. */
  readonly natsConfig?: readonly string[];
}

const live = new Set<ChildProcess>();
process.on("exit", () => {
  for (const p of live) p.kill("SIGKILL");
});

function slot(index: number, dir: string, address: string, config: Record<string, unknown>): HaCoordinator {
  const configPath = join(dir, `coordinator-${String(index)}.yaml`);
  const events: LoggedEvent[] = [];
  const stderr: string[] = [];
  const recentLines: string[] = [];
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  const admin = createClient(AdminService, address);
  const inference = createClient(InferenceService, address);
  const self: HaCoordinator = {
    index,
    address,
    admin,
    inference,
    events,
    stderr,
    recentLines,
    pid: () => (child?.exitCode === null && child.signalCode === null ? (child.pid ?? 0) : 0),
    running: () => child !== undefined && child.exitCode === null && child.signalCode === null,
    async kill() {
      if (child !== undefined && self.running()) child.kill("SIGKILL");
      await exited;
    },
    pause() {
      if (self.running()) child?.kill("SIGSTOP");
    },
    resume() {
      if (self.running()) child?.kill("SIGCONT");
    },
    async start() {
      await writeFile(configPath, JSON.stringify(config, null, 2));
      const c = spawn(process.execPath, ["--import", "tsx", coordinatorMain, "--config", configPath], { cwd: repoRootPath, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, LOG_LEVEL: "info" } });
      child = c;
      live.add(c);
      exited = new Promise((resolve) => {
        c.once("exit", () => {
          live.delete(c);
          resolve();
        });
      });
      let buf = "";
      c.stdout.setEncoding("utf8").on("data", (d: string) => {
        buf += d;
        const parts = buf.split("\n");
        buf = parts.pop() ?? "";
        for (const line of parts) {
          if (line.startsWith("{")) {
            recentLines.push(line);
            if (recentLines.length > 300) recentLines.shift();
          }
          try {
            const o = JSON.parse(line) as { msg?: string; event?: LoggedEvent };
            if (o.msg?.startsWith("event ") === true && o.event !== undefined) events.push(o.event);
          } catch {
            // not a log line
          }
        }
      });
      c.stderr.setEncoding("utf8").on("data", (d: string) => stderr.push(d));
      // Up once it answers GetHaStatus (leader or standby alike).
      await until(`coordinator ${String(index)} answers GetHaStatus`, async () => {
        if (!self.running()) throw new Error(`coordinator ${String(index)} exited; stderr: ${stderr.join("")}`);
        return (await self.status(2_000)) !== undefined;
      }, 60_000);
    },
    async status(timeoutMs = 2_000) {
      return admin.getHaStatus({}, { timeoutMs }).catch(() => undefined);
    },
  };
  return self;
}

export async function startHaCluster(o: HaClusterOptions): Promise<HaCluster> {
  const tag = uniqueTag(o.name);
  const dir = await mkdtemp(join(tmpdir(), `warden-${o.name}-`));
  const nats = await startNatsCluster(o.natsConfig === undefined ? {} : { extraConfig: o.natsConfig });
  // Two distinct ports: a port found free is not held, so two lookups in a row can return the same one.
  const ports = new Set<number>();
  while (ports.size < 2) ports.add(await freePort());
  const addresses = [...ports].map((p) => `127.0.0.1:${String(p)}`);
  const coords = addresses.map((address, i) =>
    slot(i, dir, address, {
      listen: address,
      stateDir: join(dir, `state-${String(i)}`),
      embeddedAgent: false,
      policy: { tickInterval: "100ms", enforcementRetries: 600, enforcementRetryInterval: "250ms" },
      // A load waits out busy or stopping instances (and an unreachable node) this long.
      loadWait: "150s",
      stop: { timeout: "10s", rpcTimeout: "2s" },
      recoveryWindow: "1s",
      nodeGrace: "120s",
      nats: { url: nats.urls.join(",") },
      ha: { advertise: address, holder: `coord-${String(i)}`, ...o.ha },
      models: o.models,
      ...o.config,
    }),
  );
  const agents: RemoteAgent[] = [];
  // Both at once (the tests never depend on which one leads).
  await Promise.all(coords.map((c) => c.start()));
  const cluster: HaCluster = {
    nats,
    tag,
    coords,
    addresses,
    agents,
    async leader(timeoutMs = 60_000, except = new Set()) {
      return until("one HA leader that every running coordinator agrees on", async () => {
        const seen = await Promise.all(coords.filter((c) => c.running() && !except.has(c.index)).map(async (c) => ({ c, s: await c.status() })));
        const leaders = seen.filter((x) => x.s?.self?.role === "leader");
        if (leaders.length !== 1) return undefined;
        const l = leaders[0]!;
        const agree = seen.every((x) => x.s !== undefined && x.s.epoch === l.s!.epoch && x.s.leaderHolder === l.s!.self?.holder);
        return agree ? { coord: l.c, status: l.s! } : undefined;
      }, timeoutMs);
    },
    async addAgent(nodeId, config) {
      const a = await startRemoteAgent({ coordinator: addresses.join(","), nodeId, tag, ...(config === undefined ? {} : { config }) });
      agents.push(a);
      const { coord } = await cluster.leader();
      await until(`${nodeId} ready at the leader`, async () => (await coord.admin.listNodes({}).catch(() => ({ nodes: [] }))).nodes.some((n) => n.nodeId === nodeId && n.state === NodeState.READY), 60_000);
      return a;
    },
    logged: () => coords.flatMap((c) => c.events),
    async close() {
      for (const c of coords) c.resume();
      for (const a of agents) await a.cleanup();
      await Promise.all(coords.map((c) => c.kill()));
      for (const c of coords) {
        c.admin.close();
        c.inference.close();
      }
      await nats.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
  return cluster;
}
