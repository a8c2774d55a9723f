/**
 * The swarm: N simulated agents (Register, then a heartbeat a second with 10
 * backends each, auth on, a stop or a load somewhere every second) against a
 * real coordinator process, and the same load against a bare grpc-js server
 * that only decodes and answers (the transport floor), in the same run. Per N:
 * coordinator CPU per heartbeat and in all, event-loop delay p99, RSS per node,
 * heartbeat latency p99, nodes marked unreachable, ListNodes / ListModels /
 * ExplainPlacement latency. `npm run bench -- swarm --nodes 1000,5000` picks
 * the sizes (default 100, 500, 1000); `--steady-ms 20000` the measured window;
 * `--inventory full,delta` the heartbeat kinds (default both: the agents send
 * every inventory whole, then delta heartbeats as the real agent, each against
 * its own coordinator, and a row compares them); `--explain-calls 3` the
 * ExplainPlacement calls after each window; `--generators 4` the load-generator
 * processes (default one per 2 500 nodes); `--client grpc-js` the agents' client
 * (default the lean HTTP/2 client, which leaves more of the machine to the
 * coordinator); `--heartbeat unary,stream` how the agents send heartbeats
 * (default both, each against its own coordinator and floor, and a row
 * compares them: unary Heartbeat calls, or one HeartbeatStream per agent as
 * the agent sends them); `--coordinator source` runs the coordinator from its
 * TypeScript under tsx (default `bundle`: `warden up` from the esbuild bundle,
 * as `npm start` runs it — what ships); `--node-flags "<options>"` the
 * coordinator's node options (default the installed unit's,
 * `--max-semi-space-size=64`; `--node-flags ""` for node's defaults); `--auth off`
 * runs without node tokens (an earlier checkout whose tokens file held at most
 * 4 096); `--against <checkout>` also runs each size against another
 * checkout's coordinator (an earlier commit, its node_modules in place; see
 * swarm.md), right after this one's, and a row compares the two.
 */
import type { BenchResult } from "./bench-result.js";
import { percentile, runSwarm, type SwarmResult } from "./swarm-run.js";

/**
 * The live heap is the coordinator's as its last major collection left it: without one in the
 * window that may be long before it (during registration), so it is not shown as the window's.
 */
function liveHeapText(r: Pick<SwarmResult, "gcInWindow" | "liveHeapMiB" | "liveHeapPerNodeMiB">): string {
  if (r.gcInWindow.major.count === 0) return "live heap not measured (no major collection in the window)";
  return `live heap ${r.liveHeapMiB.toFixed(0)} MiB, ${r.liveHeapPerNodeMiB.toFixed(3)} MiB/node`;
}

function flag(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
}

const fmt = (ms: readonly number[]): string => {
  const failed = ms.filter((v) => v === Number.POSITIVE_INFINITY).length;
  const ok = ms.filter((v) => v !== Number.POSITIVE_INFINITY);
  return `${ok.length === 0 ? "—" : `${percentile(ok, 99).toFixed(1)} ms`} (n=${String(ms.length)}${failed > 0 ? `, ${String(failed)} failed or past 30 s` : ""})`;
};

function describe(r: SwarmResult): Record<string, string> {
  return {
    nodes: String(r.nodes),
    auth: r.auth ? "node tokens" : "off",
    registered: `${String(r.warden.agentsStarted)} agents in ${r.warden.registrationSeconds.toFixed(0)} s (floor ${String(r.floor.agentsStarted)} in ${r.floor.registrationSeconds.toFixed(0)} s)`,
    "coordinator cores": r.warden.cores.toFixed(3),
    "floor cores": r.floor.cores.toFixed(3),
    "CPU/heartbeat": `${r.warden.cpuPerHeartbeatMs.toFixed(3)} ms vs ${r.floor.cpuPerHeartbeatMs.toFixed(3)} ms floor`,
    "heartbeats/s": `${(r.warden.heartbeats / r.warden.wallSeconds).toFixed(0)} (floor ${(r.floor.heartbeats / r.floor.wallSeconds).toFixed(0)})`,
    "hb p99": `${r.warden.agents.p99Ms.toFixed(1)} ms (floor ${r.floor.agents.p99Ms.toFixed(1)}), p50 ${r.warden.agents.p50Ms.toFixed(1)} ms (floor ${r.floor.agents.p50Ms.toFixed(1)}), failures ${String(r.warden.agents.failures)}`,
    "loop delay p99": `max ${r.loopDelayP99MaxMs.toFixed(1)} ms, median ${r.loopDelayP99MedianMs.toFixed(1)} ms${r.unansweredScrapes > 0 ? `, ${String(r.unansweredScrapes)} scrapes unanswered in 10 s` : ""} (floor: max ${r.floorLoopDelayP99MaxMs.toFixed(1)} ms, median ${r.floorLoopDelayP99MedianMs.toFixed(1)} ms)`,
    "GC in the window": `${String(r.gcInWindow.minor.count)} scavenges, ${r.gcInWindow.minor.seconds.toFixed(2)} s; ${String(r.gcInWindow.major.count)} major, ${r.gcInWindow.major.seconds.toFixed(2)} s`,
    "RSS": `${r.warden.rssMiB.toFixed(0)} MiB (idle ${r.rssIdleMiB.toFixed(0)}), ${r.rssPerNodeMiB.toFixed(3)} MiB/node; ${liveHeapText(r)}`,
    unreachable: `${String(r.unreachableInWindow)} unreachable events in the window, ${String(r.unreachableEvents)} in all (${String(r.unreachableNodes)} nodes), ${String(r.notReadyAtEnd)} not ready at its end`,
    "ListNodes p99": fmt(r.listNodesMs),
    "ListModels p99": fmt(r.listModelsMs),
    "Explain p99": `${fmt(r.explainMs)}${r.explainTimeouts > 0 ? `, ${String(r.explainTimeouts)} timed out` : ""}`,
    "generator cores": `${r.warden.generatorCores.toFixed(2)} / ${r.floor.generatorCores.toFixed(2)} (${String(r.generators)} processes, ${r.client} client)`,
    load: r.loadAverage,
  };
}

export async function run(): Promise<BenchResult[]> {
  const sizes = (flag("--nodes") ?? "100,500,1000").split(",").map((s) => Number(s.trim()));
  const steadyMs = Number(flag("--steady-ms") ?? "20000");
  const explainCalls = Number(flag("--explain-calls") ?? "3");
  const kinds = (flag("--inventory") ?? "full,delta").split(",").map((s) => s.trim());
  if (kinds.length === 0 || kinds.some((k) => k !== "full" && k !== "delta")) throw new Error(`--inventory: full, delta or both, got ${kinds.join(",")}`);
  const generators = flag("--generators") === undefined ? undefined : Number(flag("--generators"));
  if (generators !== undefined && (!Number.isInteger(generators) || generators < 1 || generators > 16)) throw new Error(`--generators: an integer in 1..16, got ${String(flag("--generators"))}`);
  const against = flag("--against");
  const modes = (flag("--heartbeat") ?? "unary,stream").split(",").map((s) => s.trim());
  if (modes.length === 0 || modes.some((m) => m !== "unary" && m !== "stream")) throw new Error(`--heartbeat: unary, stream or both, got ${modes.join(",")}`);
  const client = flag("--client") ?? "h2";
  if (client !== "h2" && client !== "grpc-js") throw new Error(`--client: h2 or grpc-js, got ${client}`);
  const nodeFlagsArg = flag("--node-flags");
  const nodeFlags = nodeFlagsArg === undefined ? {} : { nodeFlags: nodeFlagsArg.split(" ").filter((f) => f !== "") };
  const authArg = flag("--auth") ?? "on";
  if (authArg !== "on" && authArg !== "off") throw new Error(`--auth: on or off, got ${authArg}`);
  const auth = authArg === "on";
  const coordinator = flag("--coordinator") ?? "bundle";
  if (coordinator !== "bundle" && coordinator !== "source") throw new Error(`--coordinator: bundle or source, got ${coordinator}`);
  const out: BenchResult[] = [];
  const details: Record<string, string>[] = [];
  for (const nodes of sizes) {
    if (!Number.isInteger(nodes) || nodes < 1 || nodes > 10_000) throw new Error(`--nodes: each size must be an integer in 1..10000, got ${String(nodes)}`);
    const byKind = new Map<string, SwarmResult>();
    const byMode = new Map<string, SwarmResult>();
    for (const kind of kinds) for (const mode of modes) {
      process.stderr.write(`swarm: ${String(nodes)} nodes, ${kind} heartbeats, ${mode} …\n`);
      const r = await runSwarm({ nodes, steadyMs, explainCalls, deltas: kind === "delta", client, coordinator, auth, ...nodeFlags, heartbeat: mode === "stream" ? "stream" : "unary", ...(generators === undefined ? {} : { generators }) });
      // The kind's comparison (full against delta) and --against use the first mode's run.
      if (!byKind.has(kind)) byKind.set(kind, r);
      byMode.set(`${kind}/${mode}`, r);
      const d: Record<string, string> = { inventory: kind, heartbeat: mode, ...describe(r) };
      details.push(d);
      process.stderr.write(`${JSON.stringify(d)}\n`);
      const tag = `${kind === "delta" ? "delta heartbeats" : "full inventories"}, ${mode === "stream" ? "on a HeartbeatStream (floor: streams too)" : "unary"}`;
      out.push(
        { name: `swarm ${String(nodes)} nodes × 10 backends, 1 Hz, ${tag}, auth ${r.auth ? "on" : "OFF"}: coordinator CPU per heartbeat (whole process; loop p99 ${d["loop delay p99"] ?? ""}; ${d.unreachable ?? ""})`, baseline: "bare grpc-js server decoding the same heartbeats", ours: r.warden.cpuPerHeartbeatMs, baselineValue: r.floor.cpuPerHeartbeatMs, unit: "ms CPU", higherIsBetter: false },
        { name: `swarm ${String(nodes)}, ${tag}: coordinator cores in all (RSS ${d.RSS ?? ""})`, baseline: "bare grpc-js server", ours: r.warden.cores, baselineValue: r.floor.cores, unit: "cores", higherIsBetter: false },
        { name: `swarm ${String(nodes)}, ${tag}: heartbeat latency p99, client side (ListNodes ${d["ListNodes p99"] ?? ""}, ListModels ${d["ListModels p99"] ?? ""}, ExplainPlacement ${d["Explain p99"] ?? ""})`, baseline: "bare grpc-js server", ours: r.warden.agents.p99Ms, baselineValue: r.floor.agents.p99Ms, unit: "ms", higherIsBetter: false },
      );
    }
    if (against !== undefined) {
      for (const kind of kinds) {
        process.stderr.write(`swarm: ${String(nodes)} nodes, ${kind} heartbeats, the coordinator of ${against} …\n`);
        const theirs = await runSwarm({ nodes, steadyMs, explainCalls, deltas: kind === "delta", client, coordinator, auth, ...nodeFlags, checkout: against, ...(generators === undefined ? {} : { generators }) });
        const d: Record<string, string> = { inventory: kind, checkout: against, ...describe(theirs) };
        details.push(d);
        process.stderr.write(`${JSON.stringify(d)}\n`);
        const ours = byKind.get(kind);
        if (ours === undefined) continue;
        // Each against its own floor run beside it: the load may change between the two runs, the ratio to the floor less.
        out.push(
          { name: `swarm ${String(nodes)}, ${kind}: coordinator CPU per heartbeat over its floor's (ours ${ours.warden.cpuPerHeartbeatMs.toFixed(3)} / ${ours.floor.cpuPerHeartbeatMs.toFixed(3)} ms, theirs ${theirs.warden.cpuPerHeartbeatMs.toFixed(3)} / ${theirs.floor.cpuPerHeartbeatMs.toFixed(3)} ms)`, baseline: `the coordinator of ${against}`, ours: ours.warden.cpuPerHeartbeatMs / ours.floor.cpuPerHeartbeatMs, baselineValue: theirs.warden.cpuPerHeartbeatMs / theirs.floor.cpuPerHeartbeatMs, unit: "× floor", higherIsBetter: false },
          { name: `swarm ${String(nodes)}, ${kind}: RSS growth per node`, baseline: `the coordinator of ${against}`, ours: ours.rssPerNodeMiB, baselineValue: theirs.rssPerNodeMiB, unit: "MiB", higherIsBetter: false },
        );
      }
    }
    for (const kind of kinds) {
      const unary = byMode.get(`${kind}/unary`);
      const stream = byMode.get(`${kind}/stream`);
      if (unary === undefined || stream === undefined) continue;
      out.push({ name: `swarm ${String(nodes)}, ${kind}: coordinator CPU per heartbeat on a HeartbeatStream (its floor ${stream.floor.cpuPerHeartbeatMs.toFixed(3)} ms; unary floor ${unary.floor.cpuPerHeartbeatMs.toFixed(3)} ms)`, baseline: "unary Heartbeat calls, same run", ours: stream.warden.cpuPerHeartbeatMs, baselineValue: unary.warden.cpuPerHeartbeatMs, unit: "ms CPU", higherIsBetter: false });
    }
    const full = byKind.get("full");
    const delta = byKind.get("delta");
    if (full !== undefined && delta !== undefined) {
      out.push({ name: `swarm ${String(nodes)}: coordinator CPU per heartbeat, delta heartbeats (${String(delta.warden.agents.fullRequested)} full inventories asked for in the window)`, baseline: "every inventory whole, same run", ours: delta.warden.cpuPerHeartbeatMs, baselineValue: full.warden.cpuPerHeartbeatMs, unit: "ms CPU", higherIsBetter: false });
    }
  }
  console.error("swarm details:");
  console.error(JSON.stringify(details, null, 1));
  return out;
}
