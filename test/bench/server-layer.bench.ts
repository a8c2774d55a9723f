/**
 * What Warden's gRPC server layer (GrpcServer: handler wrapper, metadata
 * guard, call context) costs per heartbeat over a bare grpc-js server, both
 * answering the swarm's heartbeats with no registry, validation or auth:
 * the same load generator (swarm-agents.ts) against each in turn, three
 * rounds interleaved, server CPU per heartbeat from /proc; the median of each
 * and their ratio. `npm run bench -- server-layer [--nodes 1000] [--steady-ms 15000]`.
 */
import type { BenchResult } from "./bench-result.js";
import { measureSide, percentile, type SwarmOptions } from "./swarm-run.js";
import { forkChild, nextMessage, stopChild, stopGenerators } from "./swarm-children.js";

function flag(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
}

/** CPU per heartbeat (ms) of the server in `file`, under the swarm's load. */
async function oneSide(file: string, o: Required<SwarmOptions>): Promise<number> {
  const child = forkChild(file, []);
  try {
    const { address } = await nextMessage<{ address: string }>(child, "listening", 60_000);
    const side = await measureSide(child.pid ?? 0, address, o, undefined, async () => {});
    await stopGenerators(side.gen);
    process.stderr.write(`${file}: ${side.fig.cpuPerHeartbeatMs.toFixed(4)} ms/heartbeat, ${(side.fig.heartbeats / side.fig.wallSeconds).toFixed(0)} heartbeats/s, ${side.fig.cores.toFixed(3)} cores\n`);
    return side.fig.cpuPerHeartbeatMs;
  } finally {
    await stopChild(child);
  }
}

export async function run(): Promise<BenchResult[]> {
  const nodes = Number(flag("--nodes") ?? "1000");
  if (!Number.isInteger(nodes) || nodes < 1 || nodes > 10_000) throw new Error(`--nodes: an integer in 1..10000, got ${String(nodes)}`);
  const o: Required<SwarmOptions> = { nodes, backendsPerNode: 10, steadyMs: Number(flag("--steady-ms") ?? "15000"), warmupMs: 3_000, explainCalls: 0, explainDeadlineMs: 0, listCalls: 0, connections: Math.min(nodes, 256), auth: false, deltas: true, generators: 1, client: "h2", heartbeat: "unary", checkout: "", coordinator: "source", nodeFlags: [] };
  const floor: number[] = [];
  const wrapped: number[] = [];
  for (let round = 0; round < 3; round++) {
    floor.push(await oneSide("swarm-floor.ts", o));
    wrapped.push(await oneSide("swarm-wrapped.ts", o));
  }
  const f = percentile(floor, 50);
  const w = percentile(wrapped, 50);
  return [{ name: `server layer, ${String(nodes)} nodes' delta heartbeats at 1 Hz: server CPU per heartbeat (median of 3 interleaved rounds; GrpcServer ${wrapped.map((v) => v.toFixed(3)).join(", ")} ms, bare ${floor.map((v) => v.toFixed(3)).join(", ")} ms)`, baseline: "bare grpc-js server, same generator, same run", ours: w, baselineValue: f, unit: "ms CPU", higherIsBetter: false }];
}
