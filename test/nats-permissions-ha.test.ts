/**
 * The shipped least-privilege NATS config (services/coordinator/deploy/
 * nats-server.example.conf), as is, on a real 3-server JetStream cluster, for
 * HA: `warden nats provision --ha` as the provisioner creates the audit stream,
 * the lease and state buckets and the journal; two real HA coordinators
 * (`warden coordinator --ha` processes) connect as `coordinator-ha`, one
 * leads, and after kill -9 of the leader the other takes over (journal replay,
 * lease, audit). The `coordinator-ha` user's attempts to change any stream
 * (the audit stream to max_msgs: 1, the lease bucket), to delete one, or to
 * create or change a consumer of the audit stream are refused by the server.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { NatsConnection } from "@nats-io/transport-node";
import { AckPolicy, jetstreamManager } from "@nats-io/jetstream";
import { connectAudit } from "@warden/audit";
import { startNatsCluster, type NatsClusterHandle } from "./support/nats-cluster.js";
import { startHaCoordinator, type HaCoordinatorProcess } from "./support/ha-coordinator-process.js";
import { freePort } from "./support/free-port.js";
import { until } from "./support/coordinator-harness.js";

const confPath = fileURLToPath(new URL("../services/coordinator/deploy/nats-server.example.conf", import.meta.url));
const cliMain = fileURLToPath(new URL("../services/cli/src/main.ts", import.meta.url));
const repoRoot = fileURLToPath(new URL("..", import.meta.url));
const passwords = { provisioner: "p-secret-0", coordinator: "c-secret-1", "coordinator-ha": "h-secret-3", auditor: "a-secret-2" };
let nats: NatsClusterHandle;
let dir: string;
const connections: NatsConnection[] = [];
const coords: HaCoordinatorProcess[] = [];

beforeAll(async () => {
  process.env["WARDEN_NATS_PROVISIONER_PASSWORD"] = passwords.provisioner;
  process.env["WARDEN_NATS_COORDINATOR_PASSWORD"] = passwords.coordinator;
  process.env["WARDEN_NATS_COORDINATOR_HA_PASSWORD"] = passwords["coordinator-ha"];
  process.env["WARDEN_NATS_AUDITOR_PASSWORD"] = passwords.auditor;
  dir = await mkdtemp(join(tmpdir(), "warden-nats-perm-ha-"));
  // The shipped file's text, as is, after each server's cluster lines (the servers inherit the passwords).
  nats = await startNatsCluster({ extraConfig: [await readFile(confPath, "utf8")] });
}, 120_000);
afterAll(async () => {
  for (const c of coords) await c.kill();
  for (const nc of connections.splice(0)) await nc.close().catch(() => undefined);
  await nats.stop();
  await rm(dir, { recursive: true, force: true });
});

async function as(user: keyof typeof passwords, inboxPrefix: string): Promise<NatsConnection> {
  const nc = await connectAudit({ servers: nats.urls, credentials: { kind: "user-password", user, password: passwords[user] }, inboxPrefix, reconnectTimeWaitMs: 100 });
  connections.push(nc);
  return nc;
}

async function provision(): Promise<{ code: number | null; out: string; err: string }> {
  const args = ["--import", "tsx", cliMain, "nats", "provision", "--url", nats.urls.join(","), "--user", "provisioner", "--durable", "auditor", "--ha", "--replicas", "3", "--timeout", "120s"];
  const child = spawn(process.execPath, args, { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NATS_PASSWORD: passwords.provisioner } });
  let out = "";
  let err = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
  child.stderr.setEncoding("utf8").on("data", (d: string) => (err += d));
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  return { code, out, err };
}

async function member(i: number): Promise<HaCoordinatorProcess> {
  const address = `127.0.0.1:${String(await freePort())}`;
  const c = await startHaCoordinator(join(dir, `coord-${String(i)}.yaml`), {
    listen: address,
    stateDir: join(dir, `state-${String(i)}`),
    embeddedAgent: false,
    recoveryWindow: "1s",
    nats: { url: nats.urls.join(","), user: "coordinator-ha", pass: passwords["coordinator-ha"] },
    ha: { advertise: address, holder: `coord-${String(i)}`, replicas: 3 },
  });
  coords.push(c);
  return c;
}

/** A request the server refuses (nats.js reports the permission violation). */
async function refused(p: Promise<unknown>): Promise<void> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, "the server accepted it").toBeInstanceOf(Error);
  expect((err as Error).message).toMatch(/permissions violation/i);
}

const leads = (l: Record<string, unknown>): boolean => l["msg"] === "leading";

describe("least-privilege NATS users for HA (deploy/nats-server.example.conf on a 3-server cluster)", { timeout: 300_000 }, () => {
  it("HA coordinators lead and take over with the coordinator-ha user on provisioned buckets and journal, and cannot change a stream or an audit consumer", async () => {
    const p = await provision();
    expect(p.err).toBe("");
    expect(p.code).toBe(0);
    expect(p.out).toMatch(/^stream {2}WARDEN_JOURNAL: ready, 3 replica/m);

    const a = await member(0);
    const b = await member(1);
    const first = await until("one of them leads", () => [a, b].find((c) => c.lines.some(leads)), 120_000);
    const other = first === a ? b : a;
    await first.kill();
    // The standby takes over: lease won, journal replayed through an ordered consumer, audit published.
    await other.waitForLine("the standby leads", leads, 120_000);

    const provisioner = await as("provisioner", "_INBOX_provisioner");
    const pjsm = await jetstreamManager(provisioner, { timeout: 5_000 });
    // Both leaders' coordinator.leader events reach the audit stream.
    await until("both leaders' events on the audit stream", async () => (await pjsm.streams.info("WARDEN_EVENTS")).state.messages >= 2, 60_000);
    await other.waitForLine("its audit link ready on the provisioned stream", (l) => l["msg"] === "audit stream ready" && l["action"] === "found", 60_000);
    // Nothing it needed was refused, and the stream is as it needs it (pino levels: 40 warn, 50 error).
    const warnings = [a, b].flatMap((c) => c.lines.filter((l) => Number(l["level"]) >= 40).map((l) => JSON.stringify(l)));
    expect(warnings.filter((w) => /permission|violation|drift|provision/i.test(w))).toEqual([]);

    const ha = await as("coordinator-ha", "_INBOX_coordinator");
    const hjsm = await jetstreamManager(ha, { timeout: 5_000 });
    const audit = await hjsm.streams.info("WARDEN_EVENTS");
    await refused(hjsm.streams.update("WARDEN_EVENTS", { max_msgs: 1 }));
    await refused(hjsm.streams.add({ ...audit.config, max_msgs: 1 }));
    await refused(hjsm.streams.update("KV_warden-leader", { max_msgs_per_subject: 5 }));
    await refused(hjsm.streams.update("WARDEN_JOURNAL", { deny_delete: false }));
    await refused(hjsm.streams.delete("WARDEN_JOURNAL"));
    await refused(hjsm.streams.purge("WARDEN_EVENTS"));
    // Allowed: removing lease claim links (a new leader does after its takeover); no such link here, nothing removed.
    expect((await hjsm.streams.purge("KV_warden-leader", { filter: "$KV.warden-leader.claim.leader.0", seq: 1 })).success).toBe(true);
    await refused(hjsm.consumers.update("WARDEN_EVENTS", "auditor", { max_ack_pending: 1 }));
    await refused(hjsm.consumers.add("WARDEN_EVENTS", { durable_name: "sneaky", ack_policy: AckPolicy.Explicit, filter_subject: "warden.events.>" }));
    await refused(hjsm.consumers.delete("WARDEN_EVENTS", "auditor"));

    const after = await pjsm.streams.info("WARDEN_EVENTS");
    expect([after.config.max_msgs, after.config.num_replicas]).toEqual([-1, 3]);
    expect((await pjsm.streams.info("KV_warden-leader")).config.max_msgs_per_subject).toBe(1);
    expect((await pjsm.consumers.info("WARDEN_EVENTS", "auditor")).config.max_ack_pending).toBe(1_000);
  });
});
