/**
 * N real agent processes (default 8) start a backend-sim on one artifact
 * (default 1 GiB) at once, pulled from a real HTTP origin (node:http):
 * with peers assigned as the coordinator assigns them (PeerPlan, fan-out 2:
 * the first agent from the origin, each next one from an agent pulling it
 * now, reading its partial as it grows) against all N from the origin in the
 * same run. Reports the origin's bytes against N × size, and the wall time
 * from the N StartBackend calls to the last verified file.
 *
 * With `--origin-mib-s R` the origin sends at most R MiB/s in total across
 * all its clients (one shared link, as a model hub or registry behind an
 * uplink); without it the origin serves from memory over loopback, as fast as
 * the machine's cores allow. Also reports the CPU seconds the N agent
 * processes spent (user + system, /proc), steadier than wall time on a
 * shared machine.
 *
 * `npm run bench -- artifact-p2p [--agents 8] [--size-mib 1024] [--origin-mib-s 200] [--fanout 2]`
 */
import { randomBytes } from "node:crypto";
import { mkdir, readFile, rm } from "node:fs/promises";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { mintPeerTicket } from "@warden/common";
import { createClient } from "@warden/grpc";
import { AgentService } from "@warden/proto";
import { peerFanout } from "../../services/coordinator/src/nodes/peer-directory.js";
import { PeerPlan } from "../../services/coordinator/src/nodes/peer-plan.js";
import { newIncarnation, randomPortRange, simCatalog, tempDir, uniqueTag } from "../support/agent-harness.js";
import { startAgentProcess, writeAgentConfig, type AgentProcess } from "../support/agent-process.js";
import { sha256Hex, startArtifactServer, type ArtifactServer } from "../support/artifact-server.js";
import type { BenchResult } from "./bench-result.js";

function flag(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
}

const agents = Number(flag("--agents") ?? "8");
const sizeBytes = Number(flag("--size-mib") ?? "1024") * 1024 * 1024;
/** The origin's total rate in MiB/s (0 = unlimited loopback). */
const originMiBs = Number(flag("--origin-mib-s") ?? "0");
if (!Number.isFinite(originMiBs) || originMiBs < 0) throw new RangeError("--origin-mib-s must be a number ≥ 0");
/** Pulls one peer serves at once (default: the coordinator's, peerFanout). */
const fanout = Number(flag("--fanout") ?? String(peerFanout));
if (!Number.isInteger(fanout) || fanout < 1) throw new RangeError("--fanout must be a positive integer");

interface Round {
  readonly originBytes: number;
  readonly wallMs: number;
  readonly fromPeers: number;
  /** CPU seconds (user + system) of the N agent processes, from start to the last verified file and their exit. */
  readonly agentCpuS: number;
}

/** A process's user + system CPU seconds so far (/proc/<pid>/stat; clock ticks of 1/100 s on Linux). */
function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${String(pid)}/stat`, "utf8");
    // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return 0;
  }
}

async function round(origin: ArtifactServer, body: { path: string; sha256: string }, p2p: boolean): Promise<Round> {
  const dir = await tempDir(`warden-bench-p2p-${p2p ? "on" : "off"}`);
  const tag = uniqueTag("bench-p2p");
  const procs: AgentProcess[] = [];
  try {
    const nodes = await Promise.all(
      Array.from({ length: agents }, async (_, i) => {
        const nodeId = `bench-p2p-${String(i)}`;
        const ports = randomPortRange(2);
        const stateDir = join(dir, nodeId, "state");
        const modelsPath = join(dir, nodeId, "models");
        await mkdir(modelsPath, { recursive: true });
        const configPath = join(dir, nodeId, "agent.yaml");
        await writeAgentConfig(configPath, { nodeId, stateDir, modelsPath, ports: { min: ports.min, max: ports.max, quarantine: "0s" }, catalog: { sim: simCatalog(tag) }, grace: "5s", nvidiaSmi: "", orphanScanInterval: "1h", artifactStallTimeout: "120s", loadDeadline: "30m" });
        const proc = await startAgentProcess(configPath, ["--stop-backends-on-exit"], 120_000);
        procs.push(proc);
        return { nodeId, proc, key: Buffer.from((await readFile(join(stateDir, "peer.key"), "utf8")).trim(), "hex") };
      }),
    );
    const plan = new PeerPlan(fanout);
    const artifact = { source: `${origin.url}${body.path}`, sha256: body.sha256, sizeBytes: BigInt(sizeBytes), path: "model.bin" };
    const expiresAtMs = Date.now() + 9 * 60_000;
    const byId = new Map(nodes.map((n) => [n.nodeId, n]));
    // The order the coordinator would dispatch in: each start's peer decided as it is sent.
    const reqs = nodes.map((n) => {
      const peerId = p2p ? plan.assign(body.sha256, n.nodeId, []) : undefined;
      const peer = peerId === undefined ? undefined : byId.get(peerId);
      const peers = peer === undefined ? [] : [{ nodeId: peer.nodeId, address: peer.proc.address, ticket: mintPeerTicket(peer.key, { sha256: body.sha256, requesterNodeId: n.nodeId, holderNodeId: peer.nodeId, expiresAtMs }), expiresAtMs: BigInt(expiresAtMs) }];
      return { n, req: { incarnation: newIncarnation(), model: "m", backend: "sim", modelFile: artifact.path, artifacts: [{ ...artifact, peers }], options: [] } };
    });
    const before = origin.bytesSent;
    const t0 = performance.now();
    let lastVerifiedMs = 0;
    await Promise.all(
      reqs.map(async ({ n, req }) => {
        const client = createClient(AgentService, n.proc.address);
        try {
          for await (const ev of client.startBackend(req, { timeoutMs: 30 * 60_000 })) {
            if (ev.event.case === "pulling" && ev.event.value.verified) lastVerifiedMs = Math.max(lastVerifiedMs, performance.now() - t0);
            if (ev.event.case === "failed") throw new Error(`${n.nodeId}: ${ev.event.value.message}`);
          }
        } finally {
          client.close();
        }
      }),
    );
    const fromPeers = procs.filter((p) => p.lines.some((l) => l.includes("artifact fetched from a peer"))).length;
    const agentCpuS = procs.reduce((sum, p) => sum + cpuSeconds(p.pid), 0);
    return { originBytes: origin.bytesSent - before, wallMs: lastVerifiedMs, fromPeers, agentCpuS };
  } finally {
    await Promise.all(procs.map((p) => p.terminate()));
    await rm(dir, { recursive: true, force: true });
  }
}

export async function run(): Promise<BenchResult[]> {
  const origin = await startArtifactServer();
  origin.chunkBytes = 1024 * 1024;
  // Limited: smaller chunks, so the clients' turns on the shared link interleave finely.
  if (originMiBs > 0) {
    origin.rateBytesPerSec = originMiBs * 1024 * 1024;
    origin.chunkBytes = 256 * 1024;
  }
  const content = randomBytes(sizeBytes);
  origin.files.set("/model.bin", content);
  const body = { path: "/model.bin", sha256: sha256Hex(content) };
  try {
    // Origin-only first, then p2p: each with fresh agents and empty caches.
    const off = await round(origin, body, false);
    const on = await round(origin, body, true);
    const mib = (b: number): string => `${(b / 1024 / 1024).toFixed(0)} MiB`;
    const link = `${originMiBs > 0 ? `origin limited to ${String(originMiBs)} MiB/s in total` : "loopback origin, no limit"}, fan-out ${String(fanout)}`;
    process.stderr.write(`artifact-p2p: ${String(agents)} agents × ${mib(sizeBytes)}, ${link}: p2p origin ${mib(on.originBytes)} (${(on.originBytes / sizeBytes).toFixed(2)}× size), ${String(on.fromPeers)} from peers, ${on.wallMs.toFixed(0)} ms, agents' CPU ${on.agentCpuS.toFixed(1)} s; origin-only ${mib(off.originBytes)} (${(off.originBytes / sizeBytes).toFixed(2)}× size), ${off.wallMs.toFixed(0)} ms, agents' CPU ${off.agentCpuS.toFixed(1)} s; wall ratio p2p/origin-only ${(on.wallMs / off.wallMs).toFixed(2)}\n`);
    return [
      { name: `bytes served by the origin, ${String(agents)} agents pulling ${mib(sizeBytes)} at once, ${link}, p2p (fan-out ${String(fanout)}; ${String(on.fromPeers)} agents fetched from a peer)`, baseline: `all ${String(agents)} from the origin (N × size)`, ours: on.originBytes / 1024 / 1024, baselineValue: off.originBytes / 1024 / 1024, unit: "MiB", higherIsBetter: false },
      { name: `wall time, StartBackend ×${String(agents)} → last artifact verified, ${link}, p2p`, baseline: `all ${String(agents)} from the origin, same run`, ours: on.wallMs, baselineValue: off.wallMs, unit: "ms", higherIsBetter: false },
      { name: `CPU of the ${String(agents)} agent processes (user + system), ${link}, p2p`, baseline: `all ${String(agents)} from the origin, same run`, ours: on.agentCpuS, baselineValue: off.agentCpuS, unit: "s", higherIsBetter: false },
    ];
  } finally {
    await origin.close();
  }
}
