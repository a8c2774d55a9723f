/**
 * The nemesis test's cluster, all real processes: a 3-server nats-server
 * JetStream cluster, three `warden coordinator --ha` members (the real CLI,
 * each on fixed loopback gRPC and HTTP addresses so a restarted one is found
 * where it was) and remote agents following all three. A member that exits without this
 * file killing it is recorded (a takeover that fails must return to standby,
 * never exit) and started again so the run goes on. `close` removes every
 * process it started, and only those.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { connectAudit } from "@warden/audit";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, NodeState, type GetHaStatusResponse } from "@warden/proto";
import { startRemoteAgent, type RemoteAgent } from "./agent-process.js";
import { until } from "./coordinator-harness.js";
import { freePort } from "./free-port.js";
import { startHaCoordinator, type HaCoordinatorProcess } from "./ha-coordinator-process.js";
import { startNatsCluster, type NatsClusterHandle } from "./nats-cluster.js";

export interface UnpromptedExit {
  readonly member: number;
  readonly code: number | null;
  readonly signal: string | null;
  readonly lastLines: readonly string[];
}

export interface NemesisMember {
  readonly index: number;
  readonly address: string;
  /** Its HTTP base URL (OpenAI API, dashboard): http://127.0.0.1:<port>, the same across restarts. */
  readonly httpUrl: string;
  readonly admin: Client<typeof AdminService>;
  /** The running process's pid, 0 when none runs. */
  pid(): number;
  running(): boolean;
  paused(): boolean;
  start(): Promise<void>;
  /** Resolves once no start of this slot is under way. */
  settled(): Promise<void>;
  kill(): Promise<void>;
  pause(): void;
  resume(): void;
  status(timeoutMs?: number): Promise<GetHaStatusResponse | undefined>;
  /** Every JSON log line of every process of this slot (events included). */
  readonly lines: Record<string, unknown>[];
}

export interface NemesisCluster {
  readonly nats: NatsClusterHandle;
  readonly members: readonly NemesisMember[];
  readonly addresses: readonly string[];
  /** Every member's HTTP base URL, in member order. */
  readonly httpUrls: readonly string[];
  readonly agents: RemoteAgent[];
  readonly exits: UnpromptedExit[];
  /** The member every running, unpaused member names as leader, with its status. */
  leader(timeoutMs: number): Promise<{ readonly member: NemesisMember; readonly status: GetHaStatusResponse }>;
  /** Index of the nats-server leading `stream`'s RAFT group, read from JetStream. */
  streamLeader(stream: string, timeoutMs: number): Promise<number>;
  addAgent(nodeId: string, tag: string): Promise<RemoteAgent>;
  /** Starts again every member that is not running (one that exited on its own included). */
  restartStopped(): Promise<void>;
  close(): Promise<void>;
}

export interface NemesisClusterOptions {
  readonly name: string;
  readonly members: number;
  /** The coordinator config every member shares (listen, stateDir, nats and ha are added). */
  readonly config: Record<string, unknown>;
  readonly ha?: Record<string, unknown>;
}

function member(index: number, dir: string, address: string, httpUrl: string, config: Record<string, unknown>, exits: UnpromptedExit[]): NemesisMember {
  const lines: Record<string, unknown>[] = [];
  let proc: HaCoordinatorProcess | undefined;
  let expectingExit = false;
  let stopped = false;
  let starting: Promise<void> | undefined;
  const admin = createClient(AdminService, address);
  const alive = (): boolean => proc !== undefined && proc.child.exitCode === null && proc.child.signalCode === null;
  const self: NemesisMember = {
    index,
    address,
    httpUrl,
    admin,
    lines,
    pid: () => (alive() ? (proc?.child.pid ?? 0) : 0),
    running: alive,
    paused: () => alive() && stopped,
    start() {
      // One start per slot at a time: a background restart and a heal may both ask.
      starting ??= (async () => {
        expectingExit = false;
        stopped = false;
        const p = await startHaCoordinator(join(dir, `member-${String(index)}.yaml`), config, [], 120_000, (l) => lines.push(l));
        proc = p;
        p.child.once("exit", (code, signal) => {
          if (expectingExit) return;
          exits.push({ member: index, code, signal, lastLines: lines.slice(-15).map((l) => JSON.stringify(l)) });
        });
      })().finally(() => {
        starting = undefined;
      });
      return starting;
    },
    async settled() {
      await starting?.catch(() => undefined);
    },
    async kill() {
      expectingExit = true;
      if (stopped) proc?.child.kill("SIGCONT");
      stopped = false;
      await proc?.kill();
    },
    pause() {
      if (!alive()) return;
      stopped = true;
      proc?.child.kill("SIGSTOP");
    },
    resume() {
      if (!alive()) return;
      stopped = false;
      proc?.child.kill("SIGCONT");
    },
    async status(timeoutMs = 2_000) {
      return admin.getHaStatus({}, { timeoutMs }).catch(() => undefined);
    },
  };
  return self;
}

export async function startNemesisCluster(o: NemesisClusterOptions): Promise<NemesisCluster> {
  const dir = await mkdtemp(join(tmpdir(), `warden-${o.name}-`));
  const nats = await startNatsCluster();
  const exits: UnpromptedExit[] = [];
  // Distinct ports: a port found free is not held, so two lookups in a row can return the same one.
  const ports = new Set<number>();
  while (ports.size < 2 * o.members) ports.add(await freePort());
  const [grpcPorts, httpPorts] = [[...ports].slice(0, o.members), [...ports].slice(o.members)];
  const addresses = grpcPorts.map((p) => `127.0.0.1:${String(p)}`);
  const httpUrls = httpPorts.map((p) => `http://127.0.0.1:${String(p)}`);
  const members = addresses.map((address, i) =>
    member(i, dir, address, httpUrls[i]!, {
      ...o.config,
      listen: address,
      httpListen: httpUrls[i]!.slice("http://".length),
      stateDir: join(dir, `state-${String(i)}`),
      embeddedAgent: false,
      nats: { url: nats.urls.join(",") },
      ha: { advertise: address, holder: `member-${String(i)}`, ...o.ha },
    }, exits),
  );
  const agents: RemoteAgent[] = [];
  let nc: NatsConnection | undefined;
  const natsConnection = async (): Promise<NatsConnection> => {
    nc ??= await connectAudit({ servers: nats.urls.join(","), credentials: { kind: "none" }, name: `${o.name}-observer` });
    return nc;
  };
  await Promise.all(members.map((m) => m.start()));
  const cluster: NemesisCluster = {
    nats,
    members,
    addresses,
    httpUrls,
    agents,
    exits,
    async leader(timeoutMs) {
      return until("one leader every running member agrees on", async () => {
        const seen = await Promise.all(members.filter((m) => m.running() && !m.paused()).map(async (m) => ({ m, s: await m.status() })));
        const leaders = seen.filter((x) => x.s?.self?.role === "leader");
        if (leaders.length !== 1) return undefined;
        const l = leaders[0]!;
        const agree = seen.every((x) => x.s !== undefined && x.s.epoch === l.s!.epoch && x.s.leaderHolder === l.s!.self?.holder);
        return agree ? { member: l.m, status: l.s! } : undefined;
      }, timeoutMs);
    },
    async streamLeader(stream, timeoutMs) {
      const name = await until(`the leader of stream ${stream}`, async () => {
        const jsm = await jetstreamManager(await natsConnection(), { timeout: 2_000 });
        const info = await jsm.streams.info(stream).catch(() => undefined);
        return info?.cluster?.leader;
      }, timeoutMs);
      const i = nats.servers.findIndex((s) => s.name === name);
      if (i < 0) throw new Error(`stream ${stream} is led by ${name}, not a server of this cluster`);
      return i;
    },
    async addAgent(nodeId, tag) {
      const a = await startRemoteAgent({ coordinator: addresses.join(","), nodeId, tag });
      agents.push(a);
      await until(`${nodeId} ready at the leader`, async () => {
        const { member: m } = await cluster.leader(30_000);
        return (await m.admin.listNodes({}, { timeoutMs: 5_000 }).catch(() => ({ nodes: [] }))).nodes.some((n) => n.nodeId === nodeId && n.state === NodeState.READY);
      }, 90_000);
      return a;
    },
    async restartStopped() {
      await Promise.all(members.filter((m) => !m.running()).map((m) => m.start()));
    },
    async close() {
      await Promise.all(members.map((m) => m.settled()));
      for (const m of members) m.resume();
      for (const a of agents) await a.cleanup();
      await Promise.all(members.map((m) => m.kill()));
      for (const m of members) m.admin.close();
      await nc?.close().catch(() => undefined);
      await nats.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
  return cluster;
}
