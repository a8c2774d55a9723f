/**
 * One swarm measurement at N nodes: a real coordinator process (no embedded
 * agent, auth on at every size: one `node` token per node as `warden tokens
 * mint --role node --node <id>` makes, plaintext gRPC — no mTLS) against N
 * simulated agents in a separate load-generator process (swarm-agents.ts); then the
 * same load generator against a bare grpc-js server that only decodes and
 * answers (swarm-floor.ts). Whole-process CPU comes from /proc/<pid>/stat,
 * RSS from /proc/<pid>/status, event-loop delay from the coordinator's
 * Prometheus endpoint (prom-client's monitorEventLoopDelay p99, reset at each
 * scrape, so each scrape is one window), heartbeat latency from the agents'
 * side, admin call latency from this process.
 */
import type { ChildProcess } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, WardenError } from "@warden/common";
import { createClient } from "@warden/grpc";
import { mintToken, tokenLine } from "@warden/coordinator";
import { AdminService, NodeState } from "@warden/proto";
import { startCoordinatorProcess } from "../support/coordinator-process.js";
import { coordinatorNodeFlags } from "../../services/cli/src/install-render.js";
import { freePort } from "../support/free-port.js";
import type { SwarmAgentsConfig, SwarmAgentsReport } from "./swarm-agents.js";
import { forkChild, nextMessage, stopGenerators, type Generators } from "./swarm-children.js";
import { gcBetween, gcTotalsOf, type GcTotals } from "./swarm-gc.js";
import { measureFloor } from "./swarm-floor-run.js";

export interface SwarmOptions {
  readonly nodes: number;
  readonly backendsPerNode?: number;
  /** Steady-state window measured, after warmup. @default 20 000 */
  readonly steadyMs?: number;
  /** After every node registered, before measuring. @default 5 000 */
  readonly warmupMs?: number;
  /** ExplainPlacement calls after the steady window, each with this deadline; stops at the first timeout. */
  readonly explainCalls?: number;
  readonly explainDeadlineMs?: number;
  /** ListNodes and ListModels calls each during the steady window. @default 5 */
  readonly listCalls?: number;
  /** gRPC channels the load generator spreads its agents over. @default min(N, 256) */
  readonly connections?: number;
  /**
   * Node tokens (auth on), at every size: a tokens file holds up to 65 536 tokens, one per node and
   * the bench's admin token for the bench's 10 000 nodes at most. false: auth off. @default true
   */
  readonly auth?: boolean;
  /** The agents send delta heartbeats (as the real agent); false: every inventory whole. @default true */
  readonly deltas?: boolean;
  /** Load-generator processes the agents are split over (each its own event loop). @default ceil(N / 2 500) */
  readonly generators?: number;
  /** The agents' gRPC client: the lean HTTP/2 client (less generator CPU) or grpc-js (the real agent's). @default "h2" */
  readonly client?: "h2" | "grpc-js";
  /** How the agents send heartbeats: on one HeartbeatStream each (as the agent does) or unary calls. @default "stream" */
  readonly heartbeat?: "stream" | "unary";
  /** Run another checkout's coordinator (a baseline: an earlier commit with its node_modules); "" = this one. @default "" */
  readonly checkout?: string;
  /** The coordinator as it ships (`warden up` from the esbuild bundle, as `npm start` runs it) or from source under tsx. @default "bundle" */
  readonly coordinator?: "bundle" | "source";
  /** Options for the coordinator's node. @default the installed systemd unit's (coordinatorNodeFlags: a larger young generation) */
  readonly nodeFlags?: readonly string[];
}

export interface SideFigures {
  /** Agents that registered and heartbeat before the registration deadline (the rest never start). */
  readonly agentsStarted: number;
  /** From the first Register to the last agent's first heartbeat (or the deadline). */
  readonly registrationSeconds: number;
  readonly cpuSeconds: number;
  readonly wallSeconds: number;
  /** Heartbeats answered in the window (client side). */
  readonly heartbeats: number;
  readonly cpuPerHeartbeatMs: number;
  /** Cores used in all (cpuSeconds / wallSeconds). */
  readonly cores: number;
  readonly rssMiB: number;
  readonly agents: SwarmAgentsReport;
  /** The load generators' own cores, all processes together (to see they were not the bottleneck). */
  readonly generatorCores: number;
}

export interface SwarmResult {
  readonly nodes: number;
  readonly generators: number;
  readonly client: "h2" | "grpc-js";
  readonly auth: boolean;
  readonly warden: SideFigures;
  readonly floor: SideFigures;
  /** Worst and median of the per-scrape event-loop delay p99 windows, ms. */
  readonly loopDelayP99MaxMs: number;
  readonly loopDelayP99MedianMs: number;
  /** The same for the floor's process, windows of the same length: what the machine alone does to a loop under this load. */
  readonly floorLoopDelayP99MaxMs: number;
  readonly floorLoopDelayP99MedianMs: number;
  /** Scrapes of /metrics not answered within 10 s (windows whose p99 is unknown: the loop stalled). */
  readonly unansweredScrapes: number;
  /** The coordinator's garbage collections in the window (from its /metrics gc histogram): young-generation scavenges and major collections, count and seconds. */
  readonly gcInWindow: GcTotals;
  readonly rssPerNodeMiB: number;
  readonly rssIdleMiB: number;
  /** The coordinator's live heap (after its last major collection before the window's last scrape), MiB; NaN if never scraped. */
  readonly liveHeapMiB: number;
  /** Live heap growth over the idle coordinator's, per node: what the coordinator holds per node (RSS also counts garbage not yet collected). */
  readonly liveHeapPerNodeMiB: number;
  /** node.unreachable events the coordinator logged (whole run: registration, steady window, explain calls). */
  readonly unreachableEvents: number;
  /** Distinct nodes in those events. */
  readonly unreachableNodes: number;
  /** node.unreachable events during the steady window alone. */
  readonly unreachableInWindow: number;
  /** Nodes not READY in ListNodes at the end of the steady window. */
  readonly notReadyAtEnd: number;
  readonly listNodesMs: readonly number[];
  readonly listModelsMs: readonly number[];
  readonly explainMs: readonly number[];
  readonly explainTimeouts: number;
  readonly registeredNodes: number;
  readonly instancesListed: number;
  readonly loadAverage: string;
}

const ticksPerSecond = 100; // getconf CLK_TCK on Linux

async function cpuSeconds(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${String(pid)}/stat`, "utf8");
  // Fields after the command name (which may hold spaces): utime and stime are the 14th and 15th fields.
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(rest[11]) + Number(rest[12])) / ticksPerSecond;
}

async function rssMiB(pid: number): Promise<number> {
  const status = await readFile(`/proc/${String(pid)}/status`, "utf8");
  const kb = /VmRSS:\s+(\d+) kB/.exec(status)?.[1];
  return Number(kb ?? "0") / 1024;
}

export function percentile(values: readonly number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? Number.NaN;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Every page of a listing; undefined when a page did not answer. */
async function everyPage<R extends { nextPageToken: string }, T>(call: (pageToken: string) => Promise<R>, items: (r: R) => T[]): Promise<T[] | undefined> {
  const out: T[] = [];
  let token = "";
  do {
    const r = await call(token).catch(() => undefined);
    if (r === undefined) return undefined;
    out.push(...items(r));
    token = r.nextPageToken;
  } while (token !== "");
  return out;
}

/** Merges the reports of several generator processes into one (latency percentiles over every heartbeat). */
function mergeReports(rs: readonly SwarmAgentsReport[]): SwarmAgentsReport {
  const all = rs.flatMap((r) => r.latenciesMs).sort((a, b) => a - b);
  const sum = (f: (r: SwarmAgentsReport) => number): number => rs.reduce((s, r) => s + f(r), 0);
  return { t: "report", heartbeats: sum((r) => r.heartbeats), failures: sum((r) => r.failures), reRegistrations: sum((r) => r.reRegistrations), p50Ms: percentile(all, 50), p99Ms: percentile(all, 99), maxMs: all[all.length - 1] ?? Number.NaN, changes: sum((r) => r.changes), watchStreams: sum((r) => r.watchStreams), stopCalls: sum((r) => r.stopCalls), fullRequested: sum((r) => r.fullRequested), latenciesMs: [] };
}

/** Model groups of a swarm of `nodes` (SwarmAgentsConfig.modelGroups): no model on more than 1 000 nodes. */
export function modelGroupsOf(nodes: number): number {
  return Math.max(1, Math.ceil(nodes / 1_000));
}

/** Runs the load generators against `address` through warmup and the steady window; `during` runs in the window. */
export async function measureSide(pid: number, address: string, o: Required<SwarmOptions>, tokensFile: string | undefined, during: (signal: AbortSignal) => Promise<void>): Promise<{ fig: SideFigures; gen: Generators }> {
  const k = Math.max(1, Math.min(o.generators, o.nodes));
  const children: ChildProcess[] = [];
  for (let g = 0; g < k; g++) {
    const first = Math.floor((g * o.nodes) / k);
    const count = Math.floor(((g + 1) * o.nodes) / k) - first;
    // One stop or load a second in the whole swarm: each of k processes makes one every k seconds.
    const cfg: SwarmAgentsConfig = { address, nodes: count, firstIndex: first, client: o.client, nodePrefix: "swarm-", tokensFile, connections: Math.max(1, Math.floor(o.connections / k)), backendsPerNode: o.backendsPerNode, modelGroups: modelGroupsOf(o.nodes), deltas: o.deltas, heartbeat: o.heartbeat, changePeriodMs: 1_000 * k, registerTimeoutMs: 60_000 + o.nodes * 20 };
    children.push(forkChild("swarm-agents.ts", [JSON.stringify(cfg)]));
  }
  const gen: Generators = { children };
  try {
    return { gen, fig: await measureWith(gen, pid, o, during) };
  } catch (err) {
    await stopGenerators(gen);
    throw err;
  }
}

async function measureWith(gen: Generators, pid: number, o: Required<SwarmOptions>, during: (signal: AbortSignal) => Promise<void>): Promise<SideFigures> {
  const regs = await Promise.all(gen.children.map((c) => nextMessage<{ started: number; seconds: number }>(c, "registered", 90_000 + o.nodes * 20)));
  const reg = { started: regs.reduce((s, r) => s + r.started, 0), seconds: Math.max(...regs.map((r) => r.seconds)) };
  await sleep(o.warmupMs);
  for (const c of gen.children) c.send({ t: "reset" });
  const genPids = gen.children.map((c) => c.pid ?? 0);
  const genCpu = async (): Promise<number> => (await Promise.all(genPids.map(cpuSeconds))).reduce((s, v) => s + v, 0);
  const [c0, g0] = await Promise.all([cpuSeconds(pid), genCpu()]);
  const t0 = performance.now();
  const ctl = new AbortController();
  const side = during(ctl.signal);
  await sleep(o.steadyMs);
  ctl.abort();
  const [c1, g1] = await Promise.all([cpuSeconds(pid), genCpu()]);
  const wallSeconds = (performance.now() - t0) / 1000;
  const reports = await Promise.all(
    gen.children.map((c) => {
      const p = nextMessage<SwarmAgentsReport>(c, "report", 30_000);
      c.send({ t: "report" });
      return p;
    }),
  );
  const agents = mergeReports(reports);
  await side;
  const cpu = c1 - c0;
  return { agentsStarted: reg.started, registrationSeconds: reg.seconds, cpuSeconds: cpu, wallSeconds, heartbeats: agents.heartbeats, cpuPerHeartbeatMs: (cpu * 1000) / Math.max(1, agents.heartbeats), cores: cpu / wallSeconds, rssMiB: await rssMiB(pid), agents, generatorCores: (g1 - g0) / wallSeconds };
}

/** Live heap after the coordinator's last major collection (warden_coordinator_heap_live_bytes), MiB, from the last scrape that answered. */
let lastLiveHeapMiB = Number.NaN;

/** The coordinator's garbage collections so far, from the last scrape that answered. */
let lastGc: GcTotals | undefined;

/** The p99 of the window since the previous scrape, ms; NaN when /metrics did not answer within 10 s (a stalled loop). Notes the live heap too (one scrape: each resets the loop window). */
async function scrapeLoopP99Ms(metricsAddress: string): Promise<number> {
  let text: string;
  try {
    text = await (await fetch(`http://${metricsAddress}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
  } catch {
    return Number.NaN;
  }
  const value = (name: string): number => Number(text.split("\n").find((l) => l.startsWith(`${name} `))?.split(" ")[1] ?? "NaN");
  const live = value("warden_coordinator_heap_live_bytes");
  if (!Number.isNaN(live)) lastLiveHeapMiB = live / 2 ** 20;
  lastGc = gcTotalsOf(text) ?? lastGc;
  return value("warden_coordinator_nodejs_eventloop_lag_p99_seconds") * 1000;
}

/** Ms the call took; Infinity when it failed (a stalled coordinator misses the deadline). */
async function timed(call: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  try {
    await call();
  } catch {
    return Number.POSITIVE_INFINITY;
  }
  return performance.now() - t;
}

/** The whole measurement at one N. */
export async function runSwarm(opts: SwarmOptions): Promise<SwarmResult> {
  const o: Required<SwarmOptions> = { backendsPerNode: 10, steadyMs: 20_000, warmupMs: 5_000, explainCalls: 3, explainDeadlineMs: 10_000, listCalls: 5, connections: Math.min(opts.nodes, 256), auth: true, deltas: true, generators: Math.ceil(opts.nodes / 2_500), client: "h2", heartbeat: "stream", checkout: "", coordinator: "bundle", nodeFlags: coordinatorNodeFlags, ...opts };
  const dir = await mkdtemp(join(tmpdir(), "warden-swarm-"));
  try {
    // Tokens as `warden tokens mint` writes them: the coordinator's file holds hashes, each agent its own token.
    const adminToken = mintToken();
    const lines = [tokenLine(adminToken, "admin", { name: "bench-admin" })];
    const nodeTokens: Record<string, string> = {};
    for (let i = 0; i < (o.auth ? o.nodes : 0); i++) {
      const id = `swarm-${String(i)}`;
      const t = mintToken();
      nodeTokens[id] = t;
      lines.push(tokenLine(t, "node", { node: id, name: id }));
    }
    await writeFile(join(dir, "tokens"), `${lines.join("\n")}\n`, { mode: 0o600 });
    await writeFile(join(dir, "node-tokens.json"), JSON.stringify(nodeTokens), { mode: 0o600 });
    const metricsAddress = `127.0.0.1:${String(await freePort())}`;
    // Each node runs 10 models, one replica each; up to 1 000 nodes all run m0…m9, past it the nodes are split
    // into groups of at most 1 000 with models of their own (modelGroupsOf), so no model is past its replica
    // max (1 024, as high as it goes) and none is scaled down. `unplaced` runs nowhere, so explaining it
    // weighs every node (and what each would evict).
    const modelGroups = modelGroupsOf(o.nodes);
    const models = [...Array.from({ length: o.backendsPerNode * modelGroups }, (_, k) => ({ id: `m${String(k)}`, backend: "backend-sim", replicas: { min: 0, max: 1024 } })), { id: "unplaced", backend: "backend-sim" }];
    const coordinator = await startCoordinatorProcess(join(dir, "c.json"), {
      listen: `127.0.0.1:${String(await freePort())}`,
      stateDir: join(dir, "state"),
      embeddedAgent: false,
      metricsListen: metricsAddress,
      ...(o.auth ? { auth: { tokensFile: join(dir, "tokens") } } : {}),
      // Every simulated agent dials from 127.0.0.1, where a fleet's come from one address each.
      limits: { maxNodes: Math.max(4096, Math.min(10_000, o.nodes)), maxConnectionsPerPeer: o.connections + 16 },
      models,
    }, 60_000, { via: o.coordinator === "bundle" ? "bundle" : "coordinator", nodeFlags: o.nodeFlags, ...(o.checkout === "" ? {} : { checkout: o.checkout }) });
    const admin = createClient(AdminService, coordinator.address, o.auth ? { headers: { authorization: `Bearer ${adminToken}` } } : {});
    const listNodesMs: number[] = [];
    const listModelsMs: number[] = [];
    const explainMs: number[] = [];
    let explainTimeouts = 0;
    let warden: SideFigures;
    let gen: Generators | undefined;
    const loopP99s: number[] = [];
    let rssIdleMiB = 0;
    let liveHeapIdleMiB = Number.NaN;
    let notReadyAtEnd = 0;
    let gcAtStart: GcTotals | undefined;
    let gcAtEnd: GcTotals | undefined;
    let unreachableInWindow = 0;
    const unreachable = (): number => coordinator.events.filter((e) => e.type === "node.unreachable").length;
    let registeredNodes = 0;
    let instancesListed = 0;
    try {
      await sleep(1_000);
      rssIdleMiB = await rssMiB(coordinator.pid);
      lastLiveHeapMiB = Number.NaN;
      await scrapeLoopP99Ms(metricsAddress);
      liveHeapIdleMiB = lastLiveHeapMiB;
      const side = await measureSide(coordinator.pid, coordinator.address, o, join(dir, "node-tokens.json"), async (signal) => {
        await scrapeLoopP99Ms(metricsAddress); // resets the window
        gcAtStart = lastGc;
        const before = unreachable();
        signal.addEventListener("abort", () => { unreachableInWindow = unreachable() - before; }, { once: true });
        const scrapes = (async () => {
          // Every 5 s (shorter windows for a short run): each scrape is one window's p99.
          while (!signal.aborted) {
            await sleep(Math.min(5_000, o.steadyMs / 2));
            loopP99s.push(await scrapeLoopP99Ms(metricsAddress));
          }
        })();
        const gap = o.steadyMs / (o.listCalls + 1);
        for (let i = 0; i < o.listCalls && !signal.aborted; i++) {
          await sleep(gap);
          listNodesMs.push(await timed(() => admin.listNodes({}, { timeoutMs: 30_000 })));
          listModelsMs.push(await timed(() => admin.listModels({}, { timeoutMs: 30_000 })));
        }
        await scrapes;
        gcAtEnd = lastGc;
      });
      warden = side.fig;
      gen = side.gen;
      // -1: not answered within 30 s.
      // Every page (a listing answers at most 1 000 a call).
      const nodes = await everyPage((pageToken) => admin.listNodes({ pageSize: 1_000, pageToken }, { timeoutMs: 30_000 }), (r) => r.nodes);
      registeredNodes = nodes?.length ?? -1;
      notReadyAtEnd = nodes?.filter((n) => n.state !== NodeState.READY).length ?? -1;
      instancesListed = (await everyPage((pageToken) => admin.listModels({ pageSize: 1_000, pageToken }, { timeoutMs: 30_000 }), (r) => r.instances))?.length ?? -1;
      // Last: ExplainPlacement (its cost may stall the coordinator; nothing after it is measured).
      for (let i = 0; i < o.explainCalls; i++) {
        const t = performance.now();
        try {
          await admin.explainPlacement({ model: "unplaced" }, { timeoutMs: o.explainDeadlineMs });
          explainMs.push(performance.now() - t);
        } catch (err) {
          if (WardenError.from(err).code !== Code.DeadlineExceeded) throw err;
          explainTimeouts++;
          break;
        }
      }
    } finally {
      if (gen !== undefined) await stopGenerators(gen);
      admin.close();
      coordinator.child.kill("SIGINT");
      const killTimer = setTimeout(() => void coordinator.kill(), 15_000);
      await coordinator.exited;
      clearTimeout(killTimer);
    }
    const unreachableEvents = unreachable();
    const unreachableNodes = new Set(coordinator.events.filter((e) => e.type === "node.unreachable").map((e) => e.nodeId)).size;

    // The floor: the same load generator against a bare grpc-js server.
    const { fig: floor, loopP99s: floorLoopP99s } = await measureFloor(o, join(dir, "node-tokens.json"));
    const loadAverage = (await readFile("/proc/loadavg", "utf8")).split(" ").slice(0, 3).join(" ");
    return {
      nodes: o.nodes,
      generators: Math.max(1, Math.min(o.generators, o.nodes)),
      client: o.client,
      auth: o.auth,
      warden,
      floor,
      loopDelayP99MaxMs: Math.max(...loopP99s.filter((v) => !Number.isNaN(v))),
      loopDelayP99MedianMs: percentile(loopP99s.filter((v) => !Number.isNaN(v)), 50),
      floorLoopDelayP99MaxMs: Math.max(...floorLoopP99s),
      floorLoopDelayP99MedianMs: percentile(floorLoopP99s, 50),
      unansweredScrapes: loopP99s.filter((v) => Number.isNaN(v)).length,
      gcInWindow: gcBetween(gcAtStart, gcAtEnd),
      rssPerNodeMiB: (warden.rssMiB - rssIdleMiB) / o.nodes,
      rssIdleMiB,
      liveHeapMiB: lastLiveHeapMiB,
      liveHeapPerNodeMiB: (lastLiveHeapMiB - liveHeapIdleMiB) / o.nodes,
      unreachableEvents,
      unreachableNodes,
      unreachableInWindow,
      notReadyAtEnd,
      listNodesMs,
      listModelsMs,
      explainMs,
      explainTimeouts,
      registeredNodes,
      instancesListed,
      loadAverage,
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
