/**
 * Failover time, as the README's HA setup sees it. Real processes: a local
 * 3-server nats-server JetStream cluster, three `warden coordinator --ha`
 * (lease, renew, margin and recovery window at their defaults), two agent
 * processes following all three (`--coordinator a,b,c`), one backend-sim
 * model loaded, and steady Predict calls in flight: 4 callers, each through
 * the leader-following client over the three addresses (the CLI's and the
 * agents' client), calling back to back (20 ms after a failure).
 *
 * Per takeover, the leader is hit and the clock starts:
 * - kill -9 (WARDEN_BENCH_HA_TAKEOVERS of them, default 20): the killed
 *   member is started again and must be a standby of the new leader before
 *   the next takeover;
 * - SIGSTOP (as many): once a call was routed by another member, SIGCONT; the
 *   resumed member must be a standby of the new leader (or, if it exited, is
 *   started again) before the next takeover.
 * Measured: hit -> the first Predict answered by another member than the
 * one hit (a frozen or dead member answers nothing, so it was routed by the
 * new leader); hit -> a member reports itself leader (GetHaStatus, polled
 * every 50 ms: the lease's part, the floor the rest is measured against);
 * hit -> the new leader lists both nodes ready (agents re-registered).
 * WARDEN_BENCH_HA_DEBUG=1 prints what the agents logged during each takeover.
 * Also checked each time: the model's instance is the one loaded at the start
 * (adopted, not restarted).
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient, createH2Client, createLeaderFollowingClient } from "@warden/grpc";
import { AdminService, InferenceService, NodeState } from "@warden/proto";
import { startRemoteAgent, type RemoteAgent } from "../support/agent-process.js";
import { uniqueTag } from "../support/agent-harness.js";
import { simModel } from "../support/coordinator-harness.js";
import { freePort } from "../support/free-port.js";
import { startNatsCluster } from "../support/nats-cluster.js";
import { median, type BenchResult } from "./bench-result.js";
import { startHaCoordinator, waitForHaStatus, type HaCoordinatorProcess, type HaCoordinatorSpec } from "./ha-coordinator-process.js";

// WARDEN_BENCH_HA_TAKEOVERS: fewer for a quick try (the figures to report are over 20 of each).
const takeovers = Number(process.env.WARDEN_BENCH_HA_TAKEOVERS ?? "20");
const callers = 4;
const callDeadlineMs = 5_000;
const giveUpMs = 60_000;

const fmt = (v: number): string => (v / 1000).toFixed(2);
const sleepMs = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface Routed {
  readonly atMs: number;
  readonly by: string;
}

/** Loaded instance of `m` as the member at `address` lists it. */
async function instanceOfM(address: string): Promise<string | undefined> {
  const a = createClient(AdminService, address);
  try {
    return (await a.listModels({}, { timeoutMs: 5_000 })).instances.find((x) => x.model === "m")?.incarnation;
  } finally {
    a.close();
  }
}

async function readyNodes(address: string): Promise<number> {
  const a = createClient(AdminService, address);
  try {
    return (await a.listNodes({}, { timeoutMs: 1_000 })).nodes.filter((n) => n.state === NodeState.READY).length;
  } catch {
    return 0;
  } finally {
    a.close();
  }
}

async function leaderOf(members: readonly HaCoordinatorProcess[]): Promise<number> {
  const deadline = performance.now() + giveUpMs;
  for (;;) {
    const st = await Promise.all(members.map((m) => (m.gone() ? Promise.resolve(undefined) : m.status(1_000))));
    const li = st.findIndex((r) => r?.self?.role === "leader");
    if (li >= 0) return li;
    if (performance.now() > deadline) throw new Error("no leader");
    await sleepMs(100);
  }
}

function summary(xs: readonly number[]): string {
  const s = [...xs].sort((a, b) => a - b);
  return `${fmt(s[0] ?? 0)} / ${fmt(median(s))} / ${fmt(s[s.length - 1] ?? 0)} s`;
}

export async function run(): Promise<BenchResult[]> {
  const cluster = await startNatsCluster();
  const dir = await mkdtemp(join(tmpdir(), "warden-bench-ha-failover-"));
  const tag = uniqueTag("bench-ha-failover");
  const models = [simModel("m", { knobs: { predict_tokens: 1 } })];
  const specs: HaCoordinatorSpec[] = [];
  for (const name of ["coord-a", "coord-b", "coord-c"]) specs.push({ name, address: `127.0.0.1:${String(await freePort())}`, dir, natsUrls: cluster.urls, models });
  const addresses = specs.map((s) => s.address);
  const members: HaCoordinatorProcess[] = [];
  const agents: RemoteAgent[] = [];
  const load = { on: true };
  const routed: Routed[] = [];
  const steadyMs: number[] = [];
  let loops: Promise<void>[] = [];
  try {
    for (const s of specs) members.push(await startHaCoordinator(s));
    const first = await leaderOf(members);
    for (const [i, m] of members.entries()) if (i !== first) await waitForHaStatus(m, "standby", (r) => r.self?.role === "standby" && r.leaderAddress === addresses[first]);
    for (const nodeId of ["bench-node-1", "bench-node-2"]) agents.push(await startRemoteAgent({ coordinator: addresses.join(","), nodeId, tag }));
    const deadline = performance.now() + giveUpMs;
    while ((await readyNodes(addresses[first]!)) < 2) {
      if (performance.now() > deadline) throw new Error("agents not ready on the leader after 60 s");
      await sleepMs(100);
    }
    const admin = createClient(AdminService, addresses[first]!);
    const loaded = (await admin.loadModel({ model: "m" }, { timeoutMs: 120_000 })).instance;
    admin.close();
    if (loaded === undefined) throw new Error("LoadModel returned no instance");

    // Steady load: each caller through the leader-following client over all three members.
    loops = Array.from({ length: callers }, async () => {
      const c = createLeaderFollowingClient(InferenceService, addresses, { connect: (a) => createH2Client(InferenceService, a) });
      try {
        while (load.on) {
          const t = performance.now();
          try {
            await c.predict({ model: "m", options: { Prompt: "hi" } }, { timeoutMs: callDeadlineMs });
            const now = performance.now();
            routed.push({ atMs: now, by: c.currentAddress() });
            if (steadyMs.length < 10_000) steadyMs.push(now - t);
            await sleepMs(10);
          } catch {
            await sleepMs(20);
          }
        }
      } finally {
        c.close();
      }
    });

    const results: Record<"kill" | "stop", { routedMs: number[]; leadMs: number[]; nodesMs: number[] }> = {
      kill: { routedMs: [], leadMs: [], nodesMs: [] },
      stop: { routedMs: [], leadMs: [], nodesMs: [] },
    };
    let restarted = 0;
    for (let k = 0; k < 2 * takeovers; k++) {
      const how = k % 2 === 0 ? "kill" : "stop";
      const li = await leaderOf(members);
      const victim = members[li]!;
      for (const [i, m] of members.entries()) if (i !== li) await waitForHaStatus(m, "standby of the leader", (r) => r.self?.role === "standby" && r.leaderAddress === victim.address);
      // The steady load runs through the leader before the hit.
      const warm = routed.length;
      while (routed.length < warm + callers) await sleepMs(20);

      const agentLinesAt = agents.map((a) => a.proc.lines.length);
      const t0 = performance.now();
      const t0Wall = Date.now();
      if (how === "kill") void victim.kill();
      else victim.pause();
      let ledAt: number | undefined;
      let nodesAt: number | undefined;
      let newLeader: number | undefined;
      let routedAt: number | undefined;
      while (routedAt === undefined || nodesAt === undefined) {
        if (performance.now() - t0 > giveUpMs) throw new Error(`takeover ${String(k)} (${how}): nothing routed by another member within ${String(giveUpMs)} ms`);
        for (let i = warm; routedAt === undefined && i < routed.length; i++) if (routed[i]!.atMs > t0 && routed[i]!.by !== victim.address) routedAt = routed[i]!.atMs;
        if (newLeader === undefined) {
          const st = await Promise.all(members.map((m, i) => (i === li ? Promise.resolve(undefined) : m.status(500))));
          const i = st.findIndex((r) => r?.self?.role === "leader");
          if (i >= 0) {
            newLeader = i;
            ledAt = performance.now();
          }
        } else if ((await readyNodes(addresses[newLeader]!)) === 2) nodesAt = performance.now();
        await sleepMs(50);
      }
      const r = results[how];
      r.routedMs.push(routedAt - t0);
      r.leadMs.push((ledAt ?? routedAt) - t0);
      r.nodesMs.push(nodesAt - t0);
      if (how === "stop") victim.resume();
      else await victim.exited;
      const nl = newLeader ?? (await leaderOf(members));
      if ((await instanceOfM(addresses[nl]!)) !== loaded.incarnation) restarted++;
      process.stderr.write(`ha-failover ${how} ${String(Math.floor(k / 2) + 1)}: routed after ${fmt(routedAt - t0)} s, lease won after ${fmt((ledAt ?? routedAt) - t0)} s, both nodes ready after ${fmt(nodesAt - t0)} s (${specs[nl]!.name})\n`);
      if (process.env.WARDEN_BENCH_HA_DEBUG === "1") {
        process.stderr.write(`  hit at ${new Date(t0Wall).toISOString()}\n`);
        for (const [i, a] of agents.entries()) for (const l of a.proc.lines.slice(agentLinesAt[i])) process.stderr.write(`  ${a.nodeId}: ${l.slice(0, 300)}\n`);
      }
      // The member hit comes back as a standby of the new leader (started again if it is gone).
      if (how === "kill" || victim.gone()) {
        if (how === "stop") process.stderr.write(`ha-failover: ${victim.name} exited after SIGCONT; starting it again\n`);
        members[li] = await startHaCoordinator(specs[li]!);
      }
      await waitForHaStatus(members[li]!, "standby", (s) => s.self?.role === "standby" && s.leaderAddress === addresses[nl]);
    }
    const out: BenchResult[] = [];
    for (const how of ["kill", "stop"] as const) {
      const r = results[how];
      const label = how === "kill" ? "kill -9 leader" : "SIGSTOP leader";
      out.push(
        {
          name: `${label} -> first Predict routed by the new leader (min / median / max of ${String(takeovers)}: ${summary(r.routedMs)}; 3 coordinators, 2 agents, ${String(callers)} callers in flight; instance restarted in ${String(restarted)} of ${String(2 * takeovers)} takeovers)`,
          baseline: `${label} -> a member reports itself leader (the lease's part; min / median / max ${summary(r.leadMs)})`,
          ours: median(r.routedMs),
          baselineValue: median(r.leadMs),
          unit: "ms",
          higherIsBetter: false,
        },
        {
          name: `${label} -> first routed Predict, max of ${String(takeovers)}`,
          baseline: `${label} -> a member reports itself leader (max)`,
          ours: Math.max(...r.routedMs),
          baselineValue: Math.max(...r.leadMs),
          unit: "ms",
          higherIsBetter: false,
        },
        {
          name: `${label} -> the new leader lists both nodes ready (agents re-registered), median of ${String(takeovers)} (${summary(r.nodesMs)})`,
          baseline: `${label} -> a member reports itself leader (median)`,
          ours: median(r.nodesMs),
          baselineValue: median(r.leadMs),
          unit: "ms",
          higherIsBetter: false,
        },
      );
    }
    out.push({
      name: "steady Predict through the leader-following client, median (no failover; 4 callers)",
      baseline: "the kill -9 failover median",
      ours: median(steadyMs),
      baselineValue: median(results.kill.routedMs),
      unit: "ms",
      higherIsBetter: false,
    });
    return out;
  } finally {
    load.on = false;
    for (const m of members) m.resume();
    await Promise.all(loops);
    for (const a of agents) await a.cleanup().catch(() => undefined);
    for (const m of members) await m.stop().catch(() => undefined);
    await cluster.stop();
    await rm(dir, { recursive: true, force: true });
  }
}
