/**
 * A member that wins the lease but cannot take over, real processes: a
 * 3-server nats-server JetStream cluster and `warden coordinator --ha` members
 * as child processes. It gives the lease up and stands by again (never exits),
 * and a standby competes only while the listeners a leader opens can bind.
 */
import { createServer, type Server } from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { createClient } from "@warden/grpc";
import { AdminService } from "@warden/proto";
import { connectAudit } from "@warden/audit";
import { uniqueTag } from "./support/agent-harness.js";
import { simModel, until } from "./support/coordinator-harness.js";
import { freePort } from "./support/free-port.js";
import type { HaCoordinatorProcess } from "./support/ha-coordinator-process.js";
import { holderOf, startHaFleet, type HaFleet, type HaFleetMember } from "./support/ha-fleet.js";

let fleet: HaFleet;
const blockers: Server[] = [];
const clients: { close(): void }[] = [];

beforeAll(async () => {
  fleet = await startHaFleet("ha-takeover");
}, 90_000);

afterEach(async (ctx) => {
  if (ctx.task.result?.state === "fail") {
    for (const c of fleet.members) console.log(`${c.holder} (exit ${String(c.child.exitCode ?? c.child.signalCode)}) last lines:\n${c.lines.slice(-25).map((l) => JSON.stringify(l)).join("\n")}`);
  }
  for (const c of clients.splice(0)) c.close();
  await fleet.reset();
  for (const b of blockers.splice(0)) await new Promise((r) => b.close(r));
}, 120_000);

afterAll(async () => {
  await fleet.close();
}, 60_000);

function member(tag: string, extra: Record<string, unknown> = {}): Promise<HaFleetMember> {
  return fleet.member({ holder: holderOf(tag), config: { models: [simModel("m")], ...extra } });
}

/** A plain TCP listener holding `address`, as another process would. */
async function block(address: string): Promise<Server> {
  const [host, port] = [address.slice(0, address.lastIndexOf(":")), Number(address.slice(address.lastIndexOf(":") + 1))];
  const s = createServer();
  await new Promise<void>((resolve, reject) => {
    s.once("error", reject);
    s.listen({ host, port }, resolve);
  });
  blockers.push(s);
  return s;
}

async function unblock(s: Server): Promise<void> {
  blockers.splice(blockers.indexOf(s), 1);
  await new Promise((r) => s.close(r));
}

async function role(addr: string): Promise<string | undefined> {
  const c = createClient(AdminService, addr);
  clients.push(c);
  return (await c.getHaStatus({}, { timeoutMs: 5_000 }).catch(() => undefined))?.self?.role;
}

const msg = (text: string) => (l: Record<string, unknown>): boolean => l["msg"] === text;
const stillRunning = (c: HaCoordinatorProcess): boolean => c.child.exitCode === null && c.child.signalCode === null;

describe("HA takeover failure: back to standby, never exit", { timeout: 180_000 }, () => {
  it("a member whose HTTP port is taken does not compete for the lease (it says why and stays a standby); once the port is free it leads", async () => {
    const httpListen = `127.0.0.1:${String(await freePort())}`;
    const blocker = await block(httpListen);
    const c = await member(uniqueTag("bind"), { httpListen });
    const refused = await c.waitForLine("the refusal to compete", msg("not competing for the lease: a listener the leader needs cannot bind; checking again"), 30_000);
    expect(String(refused["problems"])).toContain(`httpListen ${httpListen}: EADDRINUSE`);
    expect(await role(c.address)).toBe("standby");
    expect(c.lines.some(msg("leading"))).toBe(false);
    await unblock(blocker);
    await c.waitForLine("leading", msg("leading"), 90_000);
    // A takeover on a loaded machine can outlast the short test lease: the member may pause, then resume in place.
    await until("it answers as the leader", async () => ((await role(c.address)) === "leader" ? true : undefined), 60_000);
    expect(stillRunning(c)).toBe(true);
  });

  it("a standby holds its HTTP port from its start (no other process can take it before a takeover); it leads on that port after kill -9 of the leader", async () => {
    const tag = uniqueTag("takeover-port");
    const a = await member(`${tag}-a`);
    await a.waitForLine("a leads", msg("leading"), 60_000);
    const httpListen = `127.0.0.1:${String(await freePort())}`;
    const b = await member(`${tag}-b`, { httpListen });
    await until("b answers as a standby", async () => ((await role(b.address)) === "standby" ? true : undefined), 30_000);
    // The port a takeover needs is the standby's own: another process cannot take it meanwhile.
    await expect(block(httpListen)).rejects.toThrow(/EADDRINUSE|address already in use/i);
    const standbyAnswer = await fetch(`http://${httpListen}/ha/leader`);
    expect(standbyAnswer.status).toBe(503);
    await a.kill();
    await b.waitForLine("b leads", msg("leading"), 90_000);
    await until("b answers as the leader", async () => ((await role(b.address)) === "leader" ? true : undefined), 60_000);
    // The leader serves HTTP on the port the standby held: the hand-over inside the process did not lose it.
    await until("b's HTTP port answers as the leader", async () => ((await fetch(`http://${httpListen}/ha/leader`)).status === 200 ? true : undefined), 30_000);
    expect(stillRunning(b)).toBe(true);
  });

  it("a takeover whose state store does not answer (its stream gone) stands by instead of exiting; it leads once the store is back", async () => {
    const tag = uniqueTag("state-gone");
    const a = await member(`${tag}-a`);
    await a.waitForLine("a leads", msg("leading"), 60_000);
    const b = await member(`${tag}-b`);
    const nc = await connectAudit({ servers: [...fleet.nats.urls], name: "ha-takeover-test-state" });
    try {
      await (await jetstreamManager(nc)).streams.delete("KV_warden-state");
      await a.kill();
      const failed = await b.waitForLine("the failed takeover", msg("takeover failed: lease given up, standing by; competing again after a pause"), 60_000);
      expect(String(failed["err"])).toContain("state store");
      await until("b answers as a standby", async () => ((await role(b.address)) === "standby" ? true : undefined), 30_000);
      expect(stillRunning(b)).toBe(true);
      // The store is back (as a member creates it): b competes again and leads.
      await new Kvm(nc).create("warden-state", { replicas: 3, history: 1, allow_direct: false });
      await b.waitForLine("b leads", msg("leading"), 120_000);
      await until("b answers as the leader", async () => ((await role(b.address)) === "leader" ? true : undefined), 60_000);
      expect(stillRunning(b)).toBe(true);
    } finally {
      await nc.close();
    }
  });
});
