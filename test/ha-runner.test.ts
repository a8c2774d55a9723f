/**
 * The HA runner, real processes: a 3-server nats-server JetStream
 * cluster, `warden coordinator --ha` members as child processes, remote agents
 * with backend-sim, and `warden ha status` through the real CLI.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, Health, HealthCheckResponse_ServingStatus, InferenceService, NodeState } from "@warden/proto";
import { Code, WardenError, leaderAddressOf } from "@warden/common";
import { uniqueTag, pidAlive } from "./support/agent-harness.js";
import { simModel, until } from "./support/coordinator-harness.js";
import { cliHaStatus } from "./support/ha-coordinator-process.js";
import { holderOf, startHaFleet, type HaFleet, type HaFleetMember, type HaMemberOptions } from "./support/ha-fleet.js";
import { startNatsCluster, type NatsClusterHandle } from "./support/nats-cluster.js";
import { storedEvents } from "./support/audit-stream-reader.js";
import { refusedWith } from "./support/refusal.js";

let fleet: HaFleet;
const clients: { close(): void }[] = [];
const ownClusters: NatsClusterHandle[] = [];

beforeAll(async () => {
  fleet = await startHaFleet("ha-runner");
}, 90_000);

afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  // Each test starts from an empty journal, lease and state (the next members create them again).
  await fleet.reset();
  for (const o of ownClusters.splice(0)) await o.stop();
}, 120_000);

afterAll(async () => {
  await fleet.close();
}, 60_000);

function member(tag: string, extra: Record<string, unknown> = {}, o: Omit<HaMemberOptions, "holder" | "config"> = {}): Promise<HaFleetMember> {
  return fleet.member({ ...o, holder: holderOf(tag), config: { policy: { tickInterval: "100ms" }, stop: { timeout: "10s", rpcTimeout: "2s" }, models: [simModel("m"), simModel("m2")], ...extra } });
}

function adminOf(addr: string): Client<typeof AdminService> {
  const c = createClient(AdminService, addr);
  clients.push(c);
  return c;
}

async function haStatus(addr: string): Promise<Awaited<ReturnType<Client<typeof AdminService>["getHaStatus"]>> | undefined> {
  return adminOf(addr).getHaStatus({}, { timeoutMs: 5_000 }).catch(() => undefined);
}

describe("HA runner: warden coordinator --ha", { timeout: 180_000 }, () => {
  it("started while JetStream has no quorum: it waits, retrying and saying so, instead of exiting, and leads once the servers are back", async () => {
    await fleet.nats.kill(1);
    await fleet.nats.kill(2);
    let retry: Record<string, unknown> | undefined;
    const starting = member(uniqueTag("ha-early"), {}, {
      startTimeoutMs: 170_000,
      onLine: (l) => {
        if (l["msg"] === "JetStream not ready for the HA buckets and journal; retrying") retry ??= l;
      },
    });
    let exited: Error | undefined;
    starting.catch((err: unknown) => {
      exited = err instanceof Error ? err : new Error("member start failed"); // awaited below; meanwhile a start failure ends the wait at once
    });
    await until("the member's retry while JetStream has no quorum", () => {
      if (exited !== undefined) throw exited;
      return retry !== undefined;
    }, 90_000);
    expect(retry?.["attempt"]).toBe(1);
    await fleet.nats.restart(1);
    await fleet.nats.restart(2);
    const c = await starting;
    const s = await until("it leads", async () => {
      const st = await haStatus(c.address);
      return st?.self?.role === "leader" ? st : undefined;
    }, 90_000);
    expect(s.quorum).toBe(true);
  });

  it("two members: one leads, both report it (CLI), the standby refuses with the leader's address; kill -9 the leader: the standby leads on a higher epoch, announces it on the audit stream, and adopts the running backend", async () => {
    const tag = uniqueTag("ha-runner");
    const a = await member(`${tag}-a`);
    const b = await member(`${tag}-b`);
    // Both, through the real CLI: the same leader and epoch; each names its own role. On a loaded
    // machine a renewal can land past the lease's margin: the leader then steps down and the key is
    // taken again a lease later (by either member, on a new epoch), and a read in that window says
    // "standby" on both. So the leader is whichever member the two agreeing reads name.
    const [leader, standby, sl, ss] = await until("one leader both agree on, the other its standby", async () => {
      const [sa, sb] = await Promise.all([cliHaStatus(a.address), cliHaStatus(b.address)]);
      const role = (s: Record<string, unknown>): unknown => (s["self"] as Record<string, unknown> | undefined)?.["role"];
      if (!([sa, sb].every((s) => (s["standbys"] as unknown[]).length === 1) && sa["epoch"] === sb["epoch"] && sa["leaderHolder"] === sb["leaderHolder"])) return undefined;
      if (role(sa) === "leader" && role(sb) === "standby" && sa["leaderHolder"] === a.holder) return [a, b, sa, sb] as const;
      if (role(sb) === "leader" && role(sa) === "standby" && sb["leaderHolder"] === b.holder) return [b, a, sb, sa] as const;
      return undefined;
    }, 60_000);
    expect(sl["leaderHolder"]).toBe(leader.holder);
    expect(ss["leaderHolder"]).toBe(leader.holder);
    expect(ss["epoch"]).toBe(sl["epoch"]);
    expect(ss["leaderAddress"]).toBe(leader.address);
    expect((sl["self"] as Record<string, unknown>)["role"]).toBe("leader");
    expect((ss["self"] as Record<string, unknown>)["role"]).toBe("standby");
    expect((sl["standbys"] as Record<string, unknown>[])[0]?.["holder"]).toBe(standby.holder);
    const epoch1 = BigInt(sl["epoch"] as string);

    // The standby refuses Admin and Inference with the leader's address.
    const e1 = await refusedWith(adminOf(standby.address).listModels({}, { timeoutMs: 5_000 }));
    expect(e1.code).toBe(Code.Unavailable);
    expect(leaderAddressOf(e1)).toBe(leader.address);
    const inf = createClient(InferenceService, standby.address);
    clients.push(inf);
    const e2 = await refusedWith(inf.predict({ model: "m", options: { Prompt: "hi" } }, { timeoutMs: 5_000 }));
    expect(leaderAddressOf(e2)).toBe(leader.address);
    const health = createClient(Health, standby.address);
    clients.push(health);
    expect((await health.check({ service: "warden.ha" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    expect((await health.check({ service: "warden.v1.AdminService" })).status).toBe(HealthCheckResponse_ServingStatus.NOT_SERVING);

    // A backend loaded through the leader.
    // The agent takes both addresses, the standby's first: it must follow the refusal to the leader.
    const agent = await fleet.agent({ coordinators: [standby.address, leader.address], nodeId: "n1", tag });
    await until("n1 ready", async () => (await adminOf(leader.address).listNodes({})).nodes.some((n) => n.nodeId === "n1" && n.state === NodeState.READY), 60_000);
    const inc = (await adminOf(leader.address).loadModel({ model: "m" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    expect(inc).not.toBe("");
    const pids = await agent.liveBackends();
    expect(pids).toHaveLength(1);

    await leader.kill();
    const s2 = await until("the standby leads", async () => {
      const s = await haStatus(standby.address);
      return s?.self?.role === "leader" ? s : undefined;
    }, 60_000);
    expect(s2.leaderHolder).toBe(standby.holder);
    expect(s2.epoch).toBeGreaterThan(epoch1);
    expect(s2.takeovers).toBe(1n);

    // The same agent process follows the new leader and reports the running backend there.
    const agentPid = agent.pid;
    const rows = await until("the new leader lists the running instance", async () => {
      const r = await adminOf(standby.address).listModels({}).catch(() => undefined);
      return r?.instances.some((i) => i.incarnation === inc) === true ? r.instances : undefined;
    }, 60_000);
    expect(rows.map((i) => i.incarnation)).toEqual([inc]);
    expect(await agent.liveBackends()).toEqual(pids);
    for (const p of pids) expect(await pidAlive(p)).toBe(true);
    expect(agent.pid).toBe(agentPid);

    // coordinator.leader reached the audit stream.
    const announced = await until("coordinator.leader on the audit stream", async () => {
      const evs = (await storedEvents(fleet.nats.urls[0]!).catch(() => undefined)) ?? [];
      return evs.find((e) => e.payload.case === "coordinatorLeader" && e.payload.value.holder === standby.holder);
    }, 60_000);
    if (announced.payload.case !== "coordinatorLeader") throw new Error("unreachable");
    expect(announced.payload.value.epoch).toBe(s2.epoch);
    expect(announced.payload.value.previousHolder).toBe(leader.holder);
    expect(announced.payload.value.resumed).toBe(false);
  });

  it("loss of quorum (2 of 3 nats-servers killed): the leader pauses — inference still routed, an unload refused and the backend kept — and resumes in place when quorum returns", async () => {
    const tag = uniqueTag("ha-quorum");
    // A JetStream cluster of its own: on the file's shared one, after the earlier tests' server kills
    // and stream deletes, the lease stream once answered "no responders" for 90 s after quorum came
    // back (nats-server 2.9.10; the member retried every lease and was refused each time). This test
    // is about Warden's pause and resume, so it starts from a cluster that lost quorum only here.
    const own = await startNatsCluster();
    ownClusters.push(own);
    // Debug lines (the lease keeper's failed writes and reads) are the account of a slow return to leading.
    const c = await member(`${tag}-c`, { nats: { url: own.urls.join(",") } }, { args: ["--log-level", "debug"] });
    await until("c leads", async () => (await haStatus(c.address))?.self?.role === "leader", 60_000);
    const admin = adminOf(c.address);
    const agent = await fleet.agent({ coordinators: [c.address], nodeId: "q1", tag });
    await until("q1 ready", async () => (await admin.listNodes({})).nodes.some((n) => n.nodeId === "q1" && n.state === NodeState.READY), 60_000);
    // UNAVAILABLE is transient by contract: on a loaded machine a 2 s lease can lapse between two
    // renewals (the leader then pauses until the next ack), and a caller retries.
    const inc = await until("m loaded", async () => {
      const r = await admin.loadModel({ model: "m" }, { timeoutMs: 60_000 }).catch((err: unknown) => {
        if (err instanceof WardenError && err.code === Code.Unavailable) return undefined;
        throw err;
      });
      return r?.instance?.incarnation;
    }, 90_000);
    const pids = await agent.liveBackends();
    expect(pids).toHaveLength(1);
    const epoch1 = (await haStatus(c.address))?.epoch ?? 0n;

    await own.kill(1);
    await own.kill(2);
    const paused = await until("c paused", async () => {
      const s = await haStatus(c.address);
      return s?.self?.role === "paused" ? s : undefined;
    }, 60_000);
    expect(paused.quorum).toBe(false);
    const health = createClient(Health, c.address);
    clients.push(health);
    expect((await health.check({ service: "warden.ha" })).status).toBe(HealthCheckResponse_ServingStatus.NOT_SERVING);
    await c.waitForLine("the no-quorum warning", (l) => l["msg"] === "no quorum: evictions and loads paused, inference still routed");

    expect((await admin.listModels({})).instances.map((i) => i.incarnation)).toEqual([inc]);
    const inf = createClient(InferenceService, c.address);
    clients.push(inf);
    const reply = await inf.predict({ model: "m", options: { Prompt: "hello", Tokens: 1 } }, { timeoutMs: 20_000 });
    expect(reply.nodeId).toBe("q1");
    // Refused up front while paused: no stop starts, nothing is sent, the instance stays registered.
    const refused = await admin.unloadModel({ model: "m" }, { timeoutMs: 30_000 }).then(() => undefined, (err: unknown) => err);
    expect(refused).toBeInstanceOf(WardenError);
    expect((refused as WardenError).code).toBe(Code.Unavailable);
    expect((refused as WardenError).message).toContain("no quorum");
    const loadRefused = await admin.loadModel({ model: "m2" }, { timeoutMs: 30_000 }).then(() => undefined, (err: unknown) => err);
    expect((loadRefused as WardenError | undefined)?.code).toBe(Code.Unavailable);
    expect((await admin.listModels({})).instances.map((i) => i.incarnation)).toEqual([inc]);
    expect(c.lines.filter((l) => l["msg"] === "event eviction.started")).toEqual([]);
    expect(await agent.liveBackends()).toEqual(pids);

    await own.restart(1);
    await own.restart(2);
    const back = await until("c leads again", async () => {
      const s = await haStatus(c.address);
      return s?.self?.role === "leader" ? s : undefined;
    }, 90_000).catch(async (err: unknown) => {
      // What the member logged since the restart is the only account of why it did not take the lease back.
      // Every line but the events, a run of one message counted once.
      const shown: string[] = [];
      let last = "";
      for (const l of c.lines) {
        const msg = String(l["msg"]);
        if (msg.startsWith("event ")) continue;
        if (msg === last) continue;
        last = msg;
        shown.push(JSON.stringify(l));
      }
      throw new Error(`${String(err)}; its last log lines (repeats collapsed):\n${shown.slice(-80).join("\n")}\nthe nats-servers:\n${await own.describe()}`);
    });
    expect(back.leaderHolder).toBe(c.holder);
    expect(back.epoch).toBeGreaterThan(epoch1);
    const leaderEvent = (l: Record<string, unknown>): Record<string, unknown> | undefined => (l["msg"] === "event coordinator.leader" ? ((l["event"] as Record<string, unknown>)["coordinatorLeader"] as Record<string, unknown>) : undefined);
    const resumed = leaderEvent(await c.waitForLine("a resumed coordinator.leader", (l) => leaderEvent(l)?.["resumed"] === true, 30_000));
    expect(resumed?.["holder"]).toBe(c.holder);
    expect(resumed?.["previousHolder"]).toBe(c.holder);
    expect(resumed?.["epoch"]).toBe(String(back.epoch));
    await c.waitForLine("the quorum-back log line", (l) => l["msg"] === "quorum back: evictions and loads resume");
    await until("the unload works again", async () => {
      await admin.unloadModel({ model: "m" }, { timeoutMs: 30_000 }).catch(() => undefined);
      return (await agent.liveBackends()).length === 0;
    }, 60_000);
  });
});
