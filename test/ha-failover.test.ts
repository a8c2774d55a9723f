/**
 * Coordinator HA over real processes: three nats-server in a
 * JetStream cluster on loopback, two coordinators with `ha:`, two agents given
 * both coordinator addresses, tagged backend-sim processes.
 *
 * - kill -9 of the leader during a burst of inference and evictions: the
 *   standby leads, every backend that ran still runs (same pid) and is routed
 *   through the new leader, the open stop intent is carried over and reaped,
 *   the audit trail on the stream has nothing lost and no eviction twice;
 * - SIGSTOP of the leader until the standby leads, then SIGCONT: it steps
 *   down, and nothing was started or stopped twice;
 * - kill of the nats-server that leads the audit stream: the same leader
 *   (a resume in place at most, when that server also led the lease
 *   bucket's RAFT group and its election outlasted the lease margin), the
 *   same backends; evictions, inference and audit publishing go on;
 *   A policy change and a drain made on the old leader hold on the new one.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { connectAudit, defaultAuditStreamName } from "@warden/audit";
import { Code, WardenError } from "@warden/common";
import { InstanceState, NodeState, UnloadOutcome } from "@warden/proto";
import { auditProblems, runningBackends, untilAuditComplete } from "./support/chaos-checks.js";
import { simModel, until } from "./support/coordinator-harness.js";
import type { LoggedEvent } from "./support/coordinator-process.js";
import type { HaCluster, HaCoordinator } from "./support/ha-cluster.js";
import { haClusterLifecycle } from "./support/ha-cluster-lifecycle.js";

const ha = haClusterLifecycle();

async function start(name: string, models: Record<string, unknown>[], config: Record<string, unknown> = {}): Promise<HaCluster> {
  return ha.start({ name, models, config }, 120);
}

function other(c: HaCluster, coord: HaCoordinator): HaCoordinator {
  return c.coords[1 - coord.index]!;
}

function codeOf(err: unknown): Code | undefined {
  return err instanceof WardenError ? err.code : undefined;
}

const onA = (id: string, extra: Record<string, unknown> = {}): Record<string, unknown> => simModel(id, { selector: { node: "a" }, ...extra });
const onB = (id: string, extra: Record<string, unknown> = {}): Record<string, unknown> => simModel(id, { selector: { node: "b" }, ...extra });

async function predictVia(coord: HaCoordinator, model: string): Promise<string | undefined> {
  const r = await coord.inference.predict({ model, options: { Prompt: "hi", Tokens: 2 } }, { timeoutMs: 30_000 });
  return r.reply?.message === undefined ? undefined : Buffer.from(r.reply.message).toString("utf8");
}

describe("coordinator HA: failover over real processes", { timeout: 300_000 }, () => {
  it("kill -9 of the leader during a burst: the standby leads, same backends (same pids) routed through it, the open stop intent carried over and reaped, the audit trail whole", async () => {
    const c = await start("ha-failover-kill", [onA("keep-a"), onB("keep-b"), onA("cycle"), onB("stuck")]);
    await c.addAgent("a");
    const b = await c.addAgent("b");
    const first = await c.leader();
    const lead = first.coord;
    for (const m of ["keep-a", "keep-b", "stuck"]) await lead.admin.loadModel({ model: m }, { timeoutMs: 60_000 });
    const before = await runningBackends(c.tag);
    expect(before.length).toBe(3);
    const stuckInc = (await lead.admin.listModels({})).instances.find((i) => i.model === "stuck")?.incarnation ?? "";
    expect(stuckInc).not.toBe("");

    // An eviction whose StopBackend cannot land: b is frozen, the stop times
    // out (rpcTimeout 2 s), the instance is a leftover with an open stop intent.
    b.pause();
    await lead.admin.unloadModel({ model: "stuck" }, { timeoutMs: 60_000 }).catch((e: unknown) => e);
    await until("stuck is a leftover at the leader", async () => (await lead.admin.listModels({})).instances.some((i) => i.incarnation === stuckInc && i.state === InstanceState.LEFTOVER), 60_000);

    // The burst: inference to keep-a through whichever coordinator answers, and load/unload cycles (evictions) of `cycle`.
    const burst = { on: true };
    const failures: unknown[] = [];
    let served = 0;
    const callers = [0, 1, 2, 3].map(async () => {
      while (burst.on) {
        for (const coord of c.coords) {
          try {
            await predictVia(coord, "keep-a");
            served++;
            break;
          } catch (err) {
            failures.push(err);
          }
        }
      }
    });
    const cycler = (async () => {
      while (burst.on) {
        for (const coord of c.coords) {
          try {
            await coord.admin.loadModel({ model: "cycle" }, { timeoutMs: 30_000 });
            await coord.admin.unloadModel({ model: "cycle" }, { timeoutMs: 30_000 });
            break;
          } catch {
            // a standby's refusal, or the dying leader: the next coordinator
          }
        }
      }
    })();
    await until("the burst is under way", () => served >= 5, 60_000);
    await lead.kill();
    const next = await c.leader(60_000);
    expect(next.coord.index).toBe(other(c, lead).index);
    expect(next.status.epoch).toBeGreaterThan(first.status.epoch);
    await until("calls served by the new leader", async () => (await predictVia(next.coord, "keep-a").catch(() => undefined)) !== undefined, 60_000);
    const servedAfter = served;
    await until("the burst goes on through the new leader", () => served >= servedAfter + 5, 60_000);
    burst.on = false;
    await Promise.all([...callers, cycler]);
    // A call that failed failed as UNAVAILABLE (the dying leader, or a standby's refusal): nothing else.
    expect(failures.map(codeOf).filter((code) => code !== Code.Unavailable)).toEqual([]);

    // The leftover is the new leader's from the start; b returns and it is reaped.
    expect((await next.coord.admin.listModels({})).instances.find((i) => i.incarnation === stuckInc)?.state).toBe(InstanceState.LEFTOVER);
    b.resume();
    await until("stuck reaped by the new leader", () => next.coord.events.some((e) => e.type === "leftover.reaped" && e.incarnation === stuckInc) || next.coord.events.some((e) => e.type === "eviction.stopped" && e.incarnation === stuckInc), 90_000);
    await until("stuck's backend gone", async () => !(await runningBackends(c.tag)).some((r) => r.incarnation === stuckInc), 60_000);

    // Same backend processes, no restart: keep-a and keep-b run with their pids and are routable.
    const after = await runningBackends(c.tag);
    for (const m of ["keep-a", "keep-b"]) {
      // b was frozen: it is ready again once it has re-registered with the new leader and reported.
      const inc = await until(`${m} ready at the new leader`, async () => (await next.coord.admin.listModels({})).instances.find((i) => i.model === m && i.state === InstanceState.READY)?.incarnation, 60_000).catch(async (err: unknown) => {
        throw new Error(`${String(err)}; rows: ${JSON.stringify((await next.coord.admin.listModels({})).instances.map((i) => [i.model, i.nodeId, i.state, i.nodeState]))}`);
      });
      expect(after.find((r) => r.incarnation === inc)?.pid).toBe(before.find((r) => r.incarnation === inc)?.pid);
      expect(await predictVia(next.coord, m)).toBeDefined();
    }
    expect(next.coord.events.some((e) => e.type === "backend.loaded" && (e.model === "keep-a" || e.model === "keep-b"))).toBe(false);
    expect(next.coord.events.filter((e) => e.type === "coordinator.leader")).toHaveLength(1);

    // The audit trail, from the stream after de-dup: every event either coordinator logged, each eviction closed once.
    const audit = await untilAuditComplete(c.nats.urls.join(","), () => c.logged(), 90_000);
    expect(auditProblems(audit.events, c.logged())).toEqual([]);
    expect(audit.events.filter((e) => e.payload.case === "coordinatorLeader").map((e) => e.payload.case === "coordinatorLeader" ? e.payload.value.epoch : 0n)).toEqual(expect.arrayContaining([first.status.epoch, next.status.epoch]));
  });

  it("SIGSTOP of the leader until the standby leads, then SIGCONT: the old one steps down; nothing started or stopped twice", async () => {
    const c = await start("ha-failover-pause", [onA("keep-a"), onB("keep-b"), onA("gone"), simModel("free")]);
    await c.addAgent("a");
    const b = await c.addAgent("b");
    await c.addAgent("c");
    const first = await c.leader();
    for (const m of ["keep-a", "keep-b", "gone"]) await first.coord.admin.loadModel({ model: m }, { timeoutMs: 60_000 });
    // Settings made on the old leader must hold on the new one.
    await first.coord.admin.updatePolicy({ patch: { idleTimeoutMs: 123_000n, idleCheck: true } });
    await first.coord.admin.drainNode({ nodeId: "c" });
    const before = await runningBackends(c.tag);
    const goneInc = (await first.coord.admin.listModels({})).instances.find((i) => i.model === "gone")?.incarnation ?? "";
    expect([before.length, goneInc !== ""]).toEqual([3, true]);
    first.coord.pause();
    const next = await c.leader(60_000, new Set([first.coord.index]));
    expect(next.coord.index).not.toBe(first.coord.index);
    expect(next.status.epoch).toBeGreaterThan(first.status.epoch);
    await until("the new leader adopted every backend", async () => (await next.coord.admin.listModels({})).instances.filter((i) => i.state === InstanceState.READY).length === 3, 60_000);
    // b's fence is raised by following the new leader alone (its Register /
    // Heartbeat answers carry the epoch): the new leader never commands b, yet
    // the old one's commands would be refused there too.
    await until("b fenced at the new epoch without a command", async () => {
      const text = await readFile(join(b.stateDir, "leader-epoch"), "utf8").catch(() => "");
      return text.includes(`"${String(next.status.epoch)}"`);
    }, 60_000);
    const policy = (await next.coord.admin.getPolicy({})).policy;
    expect([policy?.idleTimeoutMs, policy?.idleCheck]).toEqual([123_000n, true]);
    await until("c registered with the new leader, still draining", async () => (await next.coord.admin.listNodes({})).nodes.find((n) => n.nodeId === "c" && n.state === NodeState.READY)?.draining === true, 60_000);
    // The new leader changes the world while the old one sleeps.
    await next.coord.admin.unloadModel({ model: "gone" }, { timeoutMs: 60_000 });
    first.coord.resume();
    // The old leader wakes on stale state; it must step down, and its view must not act.
    await until("the old leader is a standby", async () => (await first.coord.status())?.self?.role === "standby", 60_000);
    const again = await c.leader(60_000);
    expect(again.coord.index).toBe(next.coord.index);
    // The drained node takes nothing new.
    const free = await next.coord.admin.loadModel({ model: "free" }, { timeoutMs: 60_000 });
    expect(["a", "b"]).toContain(free.instance?.nodeId);
    const after = await runningBackends(c.tag);
    expect(after.filter((r) => r.incarnation !== free.instance?.incarnation).map((r) => [r.incarnation, r.pid])).toEqual(before.filter((r) => r.incarnation !== goneInc).map((r) => [r.incarnation, r.pid]));
    // One stop of `gone` in the whole trail, by the new leader; nothing started after the pause but its own load of `free`.
    const logged = c.logged();
    expect(logged.filter((e) => e.type === "eviction.started" && e.model === "gone")).toHaveLength(1);
    expect(next.coord.events.filter((e) => e.type === "backend.loaded").map((e) => e.model)).toEqual(["free"]);
    expect(first.coord.events.filter((e) => e.type === "backend.loaded")).toHaveLength(3);
  });

  it("kill of one nats-server — the audit stream's leader: the same leader (at most a resume in place), the same backends; evictions, inference and the audit trail go on", async () => {
    const c = await start("ha-failover-nats1", [onA("keep-a"), onA("cycle")]);
    await c.addAgent("a");
    const first = await c.leader();
    await first.coord.admin.loadModel({ model: "keep-a" }, { timeoutMs: 60_000 });
    // The server that leads the audit stream (with one replica it would be the only one holding it).
    const nc = await connectAudit({ servers: c.nats.urls.join(","), credentials: { kind: "none" } });
    const info = await until("the audit stream's leader", async () => (await (await jetstreamManager(nc)).streams.info(defaultAuditStreamName).catch(() => undefined))?.cluster?.leader, 60_000);
    expect(info).toBeDefined();
    await nc.close();
    const victim = c.nats.servers.findIndex((s) => s.name === info);
    expect(victim).toBeGreaterThanOrEqual(0);
    const pidsBefore = await runningBackends(c.tag);
    await c.nats.kill(victim);
    // If the killed server also led the lease bucket's RAFT group, its election
    // can outlast the lease margin: the leader pauses (no commands) and resumes
    // in place. An eviction or load refused meanwhile is UNAVAILABLE; try again.
    let lastRefusal = "";
    const retried = async (what: string, op: () => Promise<unknown>): Promise<void> => {
      await until(what, async () => op().then(() => true, (err: unknown) => {
        if (codeOf(err) !== Code.Unavailable) throw err;
        lastRefusal = err instanceof Error ? err.message : String(err);
        return false;
      }), 60_000).catch((err: unknown) => {
        // The leader's own log is the only account of why it kept refusing.
        throw new Error(`${String(err)}; last refusal: ${lastRefusal}; the leader's last log lines:\n${first.coord.recentLines.slice(-60).join("\n")}`);
      });
    };
    // How each cycle's instance ended: stopped, or (a stop whose command met the pause) a leftover reaped after it.
    const ended = (inc: string): LoggedEvent | undefined => first.coord.events.find((e) => e.incarnation === inc && (e.type === "eviction.stopped" || e.type === "leftover.reaped"));
    const cycled: string[] = [];
    for (let i = 0; i < 3; i++) {
      let inc = "";
      await retried("load cycle", async () => {
        inc = (await first.coord.admin.loadModel({ model: "cycle" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
      });
      cycled.push(inc);
      await retried("unload cycle", async () => {
        const r = await first.coord.admin.unloadModel({ model: "cycle" }, { timeoutMs: 60_000 });
        if (r.outcome === UnloadOutcome.STOPPED || (r.outcome === UnloadOutcome.NOT_LOADED && ended(inc) !== undefined)) return;
        throw new WardenError(Code.Unavailable, `unload: outcome ${UnloadOutcome[r.outcome]} ${r.error}`);
      });
      expect(await predictVia(first.coord, "keep-a")).toBeDefined();
    }
    // The same process leads — never the other: at most a resume in place.
    const still = await c.leader();
    expect(still.coord.index).toBe(first.coord.index);
    expect(still.status.quorum).toBe(true);
    expect(c.coords[1 - first.coord.index]!.events.filter((e) => e.type === "coordinator.leader")).toEqual([]);
    // The payload is nested under its case, as on the log line: { type, coordinatorLeader: { resumed, … } }.
    const resumedFlag = (e: LoggedEvent): unknown => (e["coordinatorLeader"] as { resumed?: unknown } | undefined)?.resumed;
    const leaderEvents = first.coord.events.filter((e) => e.type === "coordinator.leader");
    expect(leaderEvents.length).toBeGreaterThanOrEqual(1);
    expect(resumedFlag(leaderEvents[0]!)).not.toBe(true); // false is left out of the JSON
    expect(leaderEvents.slice(1).filter((e) => resumedFlag(e) !== true)).toEqual([]);
    const keepInc = (await still.coord.admin.listModels({})).instances.find((i) => i.model === "keep-a")?.incarnation;
    const pidOf = (rows: readonly { incarnation: string; pid: number }[]): number | undefined => rows.find((r) => r.incarnation === keepInc)?.pid;
    expect(pidOf(await runningBackends(c.tag))).toBe(pidOf(pidsBefore));
    expect(new Set(cycled).size).toBe(3);
    for (const inc of cycled) expect(ended(inc)).toBeDefined();
    expect((await runningBackends(c.tag)).filter((r) => cycled.includes(r.incarnation))).toEqual([]);
    // Published while a server is down: every logged event is on the stream, each cycle's end included.
    const audit = await untilAuditComplete(c.nats.urls.join(","), () => c.logged(), 60_000);
    for (const inc of cycled) expect(audit.events.some((e) => e.incarnation === inc && (e.payload.case === "evictionStopped" || e.payload.case === "leftoverReaped"))).toBe(true);
  });

});
