/**
 * The swarm's load generator, run as its own process (forked by
 * swarm-run.ts) so the coordinator's CPU is measured apart from it: N
 * simulated agents speaking the real NodeService over real gRPC, each as
 * the real agent does (node-heartbeat.ts): Register, then a Heartbeat one
 * interval after the previous one answered, 5 s call timeout, register again
 * when asked. Each heartbeat carries the agent's whole inventory (10 READY
 * backends, as InventoryEntry with every field the agent fills) or, with
 * `deltas`, only its changes against the last acknowledged one (the real
 * agent's InventoryDeltaWriter: a full one first, on request and every 60 s),
 * and its resources; each call sends the node's own bearer token. Once a second,
 * somewhere in the swarm, a backend exits (reported EXITED once, then gone)
 * or a new one appears (READY, adopted by the coordinator) — a stop or a load
 * as the inventories show it.
 *
 * The agents share `connections` HTTP/2 connections (cheap: 10 000 agents do
 * not need 10 000 sockets), over the lean client (createH2Client, the same
 * gRPC wire as the agent's grpc-js client for less CPU, so the generator
 * takes less of the coordinator's cores) or, with `client:
 * "grpc-js"`, the agent's own client. A big swarm is split over several of
 * these processes (swarm-run.ts), each with its own range of node indexes. Their AgentService address is one
 * server in this process that holds the coordinator's WatchBackends streams
 * open and answers StopBackend, so the coordinator's dials succeed as against
 * real agents.
 *
 * Driven over IPC: {t:"reset"} restarts the latency window, {t:"report"}
 * answers with the window's figures, {t:"stop"} ends the process.
 */
import { Metadata } from "@grpc/grpc-js";
import { once, setMaxListeners } from "node:events";
import { readFile } from "node:fs/promises";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, WardenError, createUlidFactory, cryptoRng, systemClock, wardenVersion } from "@warden/common";
import { GrpcServer, createClient, createH2Client, type Client } from "@warden/grpc";
import { AgentService, BackendState, HeartbeatRequestSchema, NodeService, type HeartbeatRequest, type HeartbeatResponse, type InventoryEntry } from "@warden/proto";
import { InventoryDeltaWriter } from "../../services/agent/src/inventory-delta-writer.js";
import { StreamedHeartbeats } from "../../services/agent/src/streamed-heartbeats.js";

export interface SwarmAgentsConfig {
  /** The NodeService address (a coordinator or the bare floor server). */
  readonly address: string;
  readonly nodes: number;
  /** This process runs nodes firstIndex … firstIndex + nodes - 1. @default 0 */
  readonly firstIndex?: number;
  /** The agents' client: the lean HTTP/2 one (default) or grpc-js, as the real agent. */
  readonly client?: "h2" | "grpc-js";
  /** Node i is `${nodePrefix}${i}`. */
  readonly nodePrefix: string;
  /** JSON file: node id → bearer token; undefined = no auth metadata. */
  readonly tokensFile: string | undefined;
  readonly connections: number;
  readonly backendsPerNode: number;
  /**
   * Node i runs models m{(i mod modelGroups) × backendsPerNode + k}, k < backendsPerNode: with
   * ceil(nodes / 1 000) groups no model has more than 1 000 replicas (a model's replica max is 1 024).
   * @default 1
   */
  readonly modelGroups?: number;
  /** Delta heartbeats as the real agent sends them; false: every inventory whole (the agent before deltas). */
  readonly deltas: boolean;
  /** Heartbeats on one HeartbeatStream per agent (the agent's StreamedHeartbeats, unary where refused) or unary calls. @default "unary" */
  readonly heartbeat?: "stream" | "unary";
  /** One stop or load somewhere every this many ms (0 = none). */
  readonly changePeriodMs: number;
  readonly registerTimeoutMs: number;
}

export interface SwarmAgentsReport {
  readonly t: "report";
  readonly heartbeats: number;
  readonly failures: number;
  readonly reRegistrations: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  readonly changes: number;
  readonly watchStreams: number;
  readonly stopCalls: number;
  /** Answers asking for a full inventory (deltas only). */
  readonly fullRequested: number;
  /** Every heartbeat latency of the window, ms (to merge the reports of several processes). */
  readonly latenciesMs: readonly number[];
}

const intervalMs = 1_000;
const callTimeoutMs = 5_000;
const gib = 1024n ** 3n;

interface SimAgent {
  readonly nodeId: string;
  /** Its index in the whole swarm (which models it runs). */
  readonly index: number;
  readonly md: Metadata;
  readonly client: Client<typeof NodeService>;
  readonly bootEpoch: bigint;
  sequence: bigint;
  backends: InventoryEntry[];
  registered: boolean;
  readonly writer: InventoryDeltaWriter;
  /** With `heartbeat: "stream"`: this agent's stream (reset at each Register). */
  readonly streamed: StreamedHeartbeats | undefined;
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

async function main(): Promise<void> {
  const cfg = JSON.parse(process.argv[2] ?? "{}") as SwarmAgentsConfig;
  const tokens = cfg.tokensFile === undefined ? {} : (JSON.parse(await readFile(cfg.tokensFile, "utf8")) as Record<string, string>);
  const ulid = createUlidFactory(systemClock, cryptoRng);
  let watchStreams = 0;
  let stopCalls = 0;
  const stop = new AbortController();
  // Every held WatchBackends stream listens on it.
  setMaxListeners(0, stop.signal);

  // The agents' AgentService: what the coordinator dials after each Register.
  const unimplemented = (): never => {
    throw new WardenError(Code.Unimplemented, "not simulated");
  };
  const agentServer = new GrpcServer();
  agentServer.add(AgentService, {
    startBackend: () => unimplemented(),
    stopBackend: async () => {
      stopCalls++;
      return { outcome: { case: "alreadyGone", value: {} } };
    },
    freeBackend: async () => unimplemented(),
    getBackendLogs: async () => unimplemented(),
    listBackends: async () => unimplemented(),
    getNodeStatus: async () => unimplemented(),
    stopOrphan: async () => unimplemented(),
    listBundles: async () => unimplemented(),
    installBundle: async () => unimplemented(),
    removeBundle: async () => unimplemented(),
    // Held open with no event until the coordinator cancels it or the generator stops (nothing exits here).
    watchBackends: (_req, ctx) => ({
      [Symbol.asyncIterator]: () => ({
        next: () =>
          new Promise<IteratorResult<never>>((resolve) => {
            watchStreams++;
            const end = (): void => {
              watchStreams--;
              resolve({ done: true, value: undefined });
            };
            if (ctx.signal.aborted || stop.signal.aborted) end();
            else Promise.race([once(ctx.signal, "abort"), once(stop.signal, "abort")]).then(end, end);
          }),
      }),
    }),
  });
  const { address: agentAddress } = await agentServer.listen("127.0.0.1:0");

  const channels: Client<typeof NodeService>[] = Array.from({ length: Math.max(1, Math.min(cfg.connections, cfg.nodes)) }, () =>
    cfg.client === "grpc-js" ? createClient(NodeService, cfg.address, { channelOptions: { "grpc.use_local_subchannel_pool": 1 } }) : createH2Client(NodeService, cfg.address),
  );
  let addrSeq = 0;
  const addressPort = 40_000 + (cfg.firstIndex ?? 0);
  const newEntry = (model: string): InventoryEntry => {
    const a = addrSeq++;
    // Backend addresses are never dialled (nothing is routed): unique strings in a private range, the port
    // this process's own (two processes counting from 0 would report one address on two nodes, which the
    // coordinator refuses to adopt twice: those nodes would never settle).
    return create(HeartbeatRequestSchema, {
      backends: [{ incarnation: ulid(), model, address: `10.${String((a >> 16) & 255)}.${String((a >> 8) & 255)}.${String(a & 255)}:${String(addressPort)}`, pid: 10_000 + (a % 50_000), state: BackendState.READY, memoryBytes: 2n * gib, gpuDevice: "0", startedAt: timestampFromMs(Date.now()), backend: "backend-sim" }],
    }).backends[0] as InventoryEntry;
  };
  /** The models node `index` runs (SwarmAgentsConfig.modelGroups). */
  const modelOf = (index: number, k: number): string => `m${String((index % (cfg.modelGroups ?? 1)) * cfg.backendsPerNode + k)}`;
  const agents: SimAgent[] = Array.from({ length: cfg.nodes }, (_, i) => {
    const index = (cfg.firstIndex ?? 0) + i;
    const nodeId = `${cfg.nodePrefix}${String(index)}`;
    const md = new Metadata();
    const token = tokens[nodeId];
    if (token !== undefined) md.set("authorization", `Bearer ${token}`);
    const client = channels[i % channels.length] as Client<typeof NodeService>;
    const streamed = cfg.heartbeat === "stream" ? new StreamedHeartbeats({ calls: { stream: (requests, o) => client.heartbeatStream(requests, o), unary: (request, o) => client.heartbeat(request, o) }, callOptions: { metadata: md } }) : undefined;
    return { nodeId, md, client, streamed, bootEpoch: BigInt(Date.now()), sequence: 0n, index, backends: Array.from({ length: cfg.backendsPerNode }, (_, k) => newEntry(modelOf(index, k))), registered: false, writer: new InventoryDeltaWriter({ fullEveryMs: cfg.deltas ? 60_000 : 0 }) };
  });

  let lat: number[] = [];
  let failures = 0;
  let reRegistrations = 0;
  let changes = 0;
  let fullRequested = 0;

  const register = async (a: SimAgent): Promise<void> => {
    await a.client.register(
      { nodeId: a.nodeId, address: agentAddress, labels: { zone: "bench" }, gpus: [{ index: 0, name: "NVIDIA A100-SXM4-80GB", totalBytes: 80n * gib, usedBytes: 0n }], bootEpoch: a.bootEpoch, ramTotalBytes: 256n * gib, version: wardenVersion, backends: ["backend-sim"], limits: {} },
      { metadata: a.md, timeoutMs: callTimeoutMs },
    );
    a.registered = true;
    a.writer.reset();
    a.streamed?.reset();
  };
  const heartbeat = (a: SimAgent): HeartbeatRequest => {
    a.sequence++;
    const used = BigInt(a.backends.length) * 2n * gib;
    const part = a.writer.build(a.sequence, a.backends, Date.now());
    return create(HeartbeatRequestSchema, {
      nodeId: a.nodeId,
      bootEpoch: a.bootEpoch,
      sequence: a.sequence,
      ...(part.t === "full" ? { backends: part.backends } : { delta: part.delta }),
      orphans: [],
      foreign: [],
      resources: { gpus: [{ index: 0, name: "NVIDIA A100-SXM4-80GB", totalBytes: 80n * gib, usedBytes: used }], ramTotalBytes: 256n * gib, ramUsedBytes: 16n * gib + used, measuredAt: timestampFromMs(Date.now()) },
      leaderEpoch: 0n,
    });
  };
  const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms).unref());
  /** One heartbeat and its answer taken as the real agent takes it; true when the node is known. */
  const beat = async (a: SimAgent): Promise<boolean> => {
    const req = heartbeat(a);
    const r: HeartbeatResponse = a.streamed === undefined ? await a.client.heartbeat(req, { metadata: a.md, timeoutMs: callTimeoutMs }) : await a.streamed.heartbeat(req, { timeoutMs: callTimeoutMs });
    if (r.registerRequired || r.fullInventoryRequired) a.writer.reset();
    else a.writer.acknowledged(req.sequence);
    if (r.fullInventoryRequired) fullRequested++;
    return !r.registerRequired;
  };

  const loop = async (a: SimAgent): Promise<void> => {
    while (!stop.signal.aborted) {
      try {
        if (!a.registered) {
          await register(a);
          reRegistrations++;
        }
        const t0 = performance.now();
        const known = await beat(a);
        lat.push(performance.now() - t0);
        // An exited backend is reported once, then dropped (as the agent does).
        a.backends = a.backends.filter((e) => e.state !== BackendState.EXITED);
        if (!known) a.registered = false;
      } catch (err) {
        failures++;
        const e = WardenError.from(err);
        if (e.code === Code.NotFound || e.code === Code.FailedPrecondition) a.registered = false;
      }
      await sleep(intervalMs);
    }
  };
  const loops: Promise<void>[] = [];

  // Registration, 64 at a time (a fleet's agents start at different moments); each beats on at once.
  let next = 0;
  let gaveUp = 0;
  const registerStartMs = performance.now();
  const deadline = Date.now() + cfg.registerTimeoutMs;
  await Promise.all(
    Array.from({ length: 64 }, async () => {
      while (next < agents.length) {
        const a = agents[next++] as SimAgent;
        // As the real agent: Register, then its first heartbeat at once.
        // Past the deadline the rest never start: the swarm runs with the nodes that got in (reported).
        for (let known = false; !known; ) {
          if (Date.now() > deadline) {
            gaveUp++;
            break;
          }
          try {
            if (!a.registered) await register(a);
            known = await beat(a);
          } catch {
            a.registered = false;
            await sleep(250);
          }
        }
        // Beats on from here, one interval after its first (as the real agent).
        if (a.registered) loops.push(sleep(intervalMs).then(() => loop(a)));
      }
    }),
  );
  process.send?.({ t: "registered", agentAddress, started: agents.length - gaveUp, seconds: (performance.now() - registerStartMs) / 1000 });


  // A stop or a load somewhere every changePeriodMs, alternating on the same node.
  let changed: SimAgent | undefined;
  const changeTimer =
    cfg.changePeriodMs > 0
      ? setInterval(() => {
          if (changed === undefined) {
            const a = agents[Math.floor(Math.random() * agents.length)] as SimAgent;
            const victim = a.backends[Math.floor(Math.random() * a.backends.length)];
            if (victim === undefined) return;
            victim.state = BackendState.EXITED;
            changed = a;
          } else {
            changed.backends.push(newEntry(modelOf(changed.index, Math.floor(Math.random() * cfg.backendsPerNode))));
            changed = undefined;
          }
          changes++;
        }, cfg.changePeriodMs)
      : undefined;

  // The bench process is gone (crashed or killed): nothing would ever stop this one.
  process.on("disconnect", () => process.exit(1));
  process.on("message", (m: { t: string }) => {
    if (m.t === "reset") {
      lat = [];
      failures = 0;
      reRegistrations = 0;
      changes = 0;
      fullRequested = 0;
    } else if (m.t === "report") {
      const sorted = [...lat].sort((x, y) => x - y);
      const report: SwarmAgentsReport = { t: "report", heartbeats: lat.length, failures, reRegistrations, p50Ms: percentile(sorted, 50), p99Ms: percentile(sorted, 99), maxMs: sorted[sorted.length - 1] ?? Number.NaN, changes, watchStreams, stopCalls, fullRequested, latenciesMs: sorted };
      process.send?.(report);
    } else if (m.t === "stop") {
      stop.abort();
      if (changeTimer !== undefined) clearInterval(changeTimer);
      void Promise.all(loops)
        .then(async () => {
          for (const a of agents) a.streamed?.close();
          for (const c of channels) c.close();
          await agentServer.shutdown(100);
        })
        .finally(() => process.exit(0));
    }
  });
}

main().catch((err: unknown) => {
  process.stderr.write(`swarm-agents: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
