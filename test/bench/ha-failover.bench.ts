/**
 * Failover time (issue 17): kill -9 the leading coordinator, then the first
 * successful routed Predict through the new leader. Real processes: a local
 * 3-server nats-server JetStream cluster, two `warden coordinator --ha`
 * (lease, renew, margin and recovery window at their defaults), one agent
 * process following both (`--coordinator a,b`) with one backend-sim model
 * loaded. Each takeover: the standby is polled with Predict (1 s deadline per
 * call, 20 ms apart) from the moment the kill is sent; then the killed one is
 * started again (a new incarnation) and must be a standby before the next.
 *
 * Also checked on every takeover: the call was served by the instance loaded
 * at the start (same incarnation, address and backend pid: adopted, not restarted).
 *
 * Also timed: kill -> the standby's GetHaStatus says leader (polled in the same
 * loop), the part of the failover the lease accounts for.
 *
 * Baseline line: the same Predict through the leader before the kill (what a
 * routed call costs with no failover), to read the failover time against.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient } from "@warden/grpc";
import { AdminService, InferenceService, NodeState } from "@warden/proto";
import { startRemoteAgent, type RemoteAgent } from "../support/agent-process.js";
import { uniqueTag } from "../support/agent-harness.js";
import { simModel } from "../support/coordinator-harness.js";
import { freePort } from "../support/free-port.js";
import { startNatsCluster } from "../support/nats-cluster.js";
import { median, type BenchResult } from "./bench-result.js";
import { startHaCoordinator, waitForHaStatus, type HaCoordinatorProcess, type HaCoordinatorSpec } from "./ha-coordinator-process.js";

// WARDEN_BENCH_HA_TAKEOVERS: fewer for a quick try (the figure to report is over 20).
const takeovers = Number(process.env.WARDEN_BENCH_HA_TAKEOVERS ?? "20");
const pollGapMs = 20;
const callDeadlineMs = 1_000;
const giveUpMs = 60_000;

const fmt = (v: number): string => v.toPrecision(3);

async function predictOnce(address: string): Promise<boolean> {
  const c = createClient(InferenceService, address);
  try {
    await c.predict({ model: "m", options: { Prompt: "hi" } }, { timeoutMs: callDeadlineMs });
    return true;
  } catch {
    return false;
  } finally {
    c.close();
  }
}

/** Loaded instance of `m` as the member at `address` lists it. */
async function instanceOfM(address: string): Promise<{ incarnation: string; address: string } | undefined> {
  const a = createClient(AdminService, address);
  try {
    const i = (await a.listModels({}, { timeoutMs: 5_000 })).instances.find((x) => x.model === "m");
    return i === undefined ? undefined : { incarnation: i.incarnation, address: i.address };
  } finally {
    a.close();
  }
}

export async function run(): Promise<BenchResult[]> {
  const cluster = await startNatsCluster();
  const dir = await mkdtemp(join(tmpdir(), "warden-bench-ha-failover-"));
  const tag = uniqueTag("bench-ha-failover");
  const models = [simModel("m", { knobs: { predict_tokens: 1 } })];
  const specs: HaCoordinatorSpec[] = [];
  for (const name of ["coord-a", "coord-b"]) specs.push({ name, address: `127.0.0.1:${String(await freePort())}`, dir, natsUrls: cluster.urls, models });
  const members: (HaCoordinatorProcess | undefined)[] = [undefined, undefined];
  let agent: RemoteAgent | undefined;
  try {
    members[0] = await startHaCoordinator(specs[0]!);
    await waitForHaStatus(members[0], "leader", (r) => r.self?.role === "leader");
    members[1] = await startHaCoordinator(specs[1]!);
    await waitForHaStatus(members[1], "standby", (r) => r.self?.role === "standby" && r.leaderAddress === specs[0]!.address);
    agent = await startRemoteAgent({ coordinator: specs.map((s) => s.address).join(","), nodeId: "bench-node", tag });
    const admin = createClient(AdminService, specs[0]!.address);
    const deadline = performance.now() + 60_000;
    while (!(await admin.listNodes({}).catch(() => ({ nodes: [] }))).nodes.some((n) => n.state === NodeState.READY)) {
      if (performance.now() > deadline) throw new Error("agent not ready on the leader after 60 s");
      await new Promise((r) => setTimeout(r, 100));
    }
    const loaded = (await admin.loadModel({ model: "m" }, { timeoutMs: 120_000 })).instance;
    admin.close();
    if (loaded === undefined) throw new Error("LoadModel returned no instance");
    const pids = (await agent.liveBackends()).join(",");

    const failoverMs: number[] = [];
    const leadsMs: number[] = []; // kill -> the standby reports itself leader (GetHaStatus)
    const steadyMs: number[] = [];
    let restarted = 0;
    for (let k = 0; k < takeovers; k++) {
      const li = (await Promise.all(members.map((m) => (m === undefined ? Promise.resolve(undefined) : m.status())))).findIndex((r) => r?.self?.role === "leader");
      if (li < 0) throw new Error(`takeover ${String(k)}: no leader`);
      const leader = members[li]!;
      const standby = members[1 - li]!;
      await waitForHaStatus(standby, "standby of the leader", (r) => r.self?.role === "standby" && r.leaderAddress === leader.address);
      // A routed call through the leader first: the instance is routable before the kill.
      const s0 = performance.now();
      if (!(await predictOnce(leader.address))) throw new Error(`takeover ${String(k)}: Predict through the leader failed before the kill`);
      steadyMs.push(performance.now() - s0);

      const t0 = performance.now();
      const killed = leader.kill();
      let ok = false;
      let ledAt: number | undefined;
      while (!ok) {
        if (performance.now() - t0 > giveUpMs) throw new Error(`takeover ${String(k)}: no routed call through ${standby.name} within ${String(giveUpMs)} ms`);
        if (ledAt === undefined && (await standby.status(500))?.self?.role === "leader") ledAt = performance.now();
        ok = await predictOnce(standby.address);
        if (!ok) await new Promise((r) => setTimeout(r, pollGapMs));
      }
      failoverMs.push(performance.now() - t0);
      leadsMs.push((ledAt ?? performance.now()) - t0);
      await killed;
      const now = await instanceOfM(standby.address);
      if (now?.incarnation !== loaded.incarnation || now.address !== loaded.address || (await agent.liveBackends()).join(",") !== pids) restarted++;
      process.stderr.write(`ha-failover takeover ${String(k + 1)}: routed after ${fmt(failoverMs[k]!)} ms, leader after ${fmt(leadsMs[k]!)} ms (${standby.name})\n`);
      // The killed member comes back as a new incarnation and must be a standby before the next kill.
      members[li] = await startHaCoordinator(specs[li]!);
      await waitForHaStatus(members[li], "standby", (r) => r.self?.role === "standby" && r.leaderAddress === standby.address);
    }
    const sorted = [...failoverMs].sort((a, b) => a - b);
    return [
      {
        name: `failover, kill -9 leader -> first routed Predict via the new leader, median of ${String(takeovers)} (min ${fmt(sorted[0]!)}, max ${fmt(sorted[sorted.length - 1]!)}; defaults lease 3s, recoveryWindow 3s; instance restarted on ${String(restarted)} of ${String(takeovers)})`,
        baseline: "Predict via the leader, no failover",
        ours: median(failoverMs),
        baselineValue: median(steadyMs),
        unit: "ms",
        higherIsBetter: false,
      },
      {
        name: `kill -9 leader -> the standby reports itself leader, median of ${String(takeovers)} (max ${fmt(Math.max(...leadsMs))}) vs the first routed call`,
        baseline: "first routed call via the new leader (median)",
        ours: median(leadsMs),
        baselineValue: median(failoverMs),
        unit: "ms",
        higherIsBetter: false,
      },
      {
        name: `failover, max of ${String(takeovers)}`,
        baseline: "Predict via the leader, no failover (max)",
        ours: Math.max(...failoverMs),
        baselineValue: Math.max(...steadyMs),
        unit: "ms",
        higherIsBetter: false,
      },
    ];
  } finally {
    await agent?.cleanup().catch(() => undefined);
    for (const m of members) await m?.stop().catch(() => undefined);
    await cluster.stop();
    await rm(dir, { recursive: true, force: true });
  }
}
