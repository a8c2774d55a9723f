/**
 * The shipped least-privilege NATS config (services/coordinator/deploy/
 * nats-server.example.conf), as is, on a real nats-server. A real coordinator,
 * connecting as `coordinator`, cannot create the audit stream: it waits (its
 * events kept in the outbox) until `warden nats provision`, run as a child
 * process with the `provisioner` user, creates the stream and the auditor's
 * durable; then it publishes, and the `auditor` reads every event back. The
 * coordinator user's attempts to change the stream (max_msgs: 1) or any
 * consumer are refused by the server, as is every other publish either
 * identity tries. A stream changed behind the coordinator's back (by someone
 * holding the provisioner's rights) is reported: a warning and
 * `warden_audit_stream_drift`, until provisioning puts it right.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { NatsConnection } from "@nats-io/transport-node";
import { AckPolicy, JetStreamApiCodes, JetStreamApiError, jetstreamManager } from "@nats-io/jetstream";
import { connectAudit, subscribeAuditEvents, type AuditDelivery } from "@warden/audit";
import { defaultCoordinatorInboxPrefix } from "@warden/coordinator";
import { startNatsServer, type NatsServerHandle } from "./support/nats-server.js";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { recordingLogger, type RecordingLogger } from "./support/recording-logger.js";

const confPath = fileURLToPath(new URL("../services/coordinator/deploy/nats-server.example.conf", import.meta.url));
const cliMain = fileURLToPath(new URL("../services/cli/src/main.ts", import.meta.url));
const repoRoot = fileURLToPath(new URL("..", import.meta.url));
const passwords = { provisioner: "p-secret-0", coordinator: "c-secret-1", auditor: "a-secret-2" };
type User = keyof typeof passwords;
let server: NatsServerHandle;
const connections: NatsConnection[] = [];

beforeAll(async () => {
  // The example takes its passwords from nats-server's environment (the spawned server inherits ours).
  process.env["WARDEN_NATS_PROVISIONER_PASSWORD"] = passwords.provisioner;
  process.env["WARDEN_NATS_COORDINATOR_PASSWORD"] = passwords.coordinator;
  process.env["WARDEN_NATS_AUDITOR_PASSWORD"] = passwords.auditor;
  process.env["WARDEN_NATS_COORDINATOR_HA_PASSWORD"] = "h-secret-3"; // HA's user: test/nats-permissions-ha.test.ts
  server = await startNatsServer({ args: ["-c", confPath] });
});
afterAll(async () => {
  for (const nc of connections.splice(0)) await nc.close().catch(() => undefined);
  await server.dispose();
});

async function as(user: User, inboxPrefix: string): Promise<{ nc: NatsConnection; violations: string[] }> {
  const nc = await connectAudit({ servers: server.url, credentials: { kind: "user-password", user, password: passwords[user] }, inboxPrefix, reconnectTimeWaitMs: 100 });
  connections.push(nc);
  const violations: string[] = [];
  void (async () => {
    for await (const s of nc.status()) {
      if (s.type !== "error") continue;
      const e = s.error as { name?: string; operation?: string; subject?: string };
      if (e.name === "PermissionViolationError") violations.push(`${e.operation ?? "?"} ${e.subject ?? "?"}`);
    }
  })();
  return { nc, violations };
}

/** `warden nats provision` as the operator runs it: its own process, the password in NATS_PASSWORD. */
async function provision(...extra: string[]): Promise<{ code: number | null; out: string; err: string }> {
  const child = spawn(process.execPath, ["--import", "tsx", cliMain, "nats", "provision", "--url", server.url, "--user", "provisioner", "--durable", "auditor", ...extra], {
    cwd: repoRoot,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, NATS_PASSWORD: passwords.provisioner },
  });
  let out = "";
  let err = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
  child.stderr.setEncoding("utf8").on("data", (d: string) => (err += d));
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  return { code, out, err };
}

/** Reads the auditor's durable until `n` events arrived. */
async function readAsAuditor(nc: NatsConnection, n: number): Promise<AuditDelivery[]> {
  const ctl = new AbortController();
  const seen: AuditDelivery[] = [];
  for await (const d of subscribeAuditEvents(nc, { durable: "auditor", signal: ctl.signal })) {
    seen.push(d);
    if (seen.length >= n) break;
  }
  ctl.abort();
  return seen;
}

/** A real coordinator connecting as `coordinator`, with an embedded node and one model. */
async function coordinator(log: RecordingLogger): Promise<TestCoordinator> {
  return startTestCoordinator({ models: [simModel("m")], logger: log, extra: { nats: { url: server.url, user: "coordinator", pass: passwords.coordinator } } });
}

/** Loads the model (events after start-up's) and waits until every event so far is on the stream; returns how many. */
async function publishSome(t: TestCoordinator): Promise<number> {
  await t.inference.predict({ model: "m", options: { Prompt: "hi" } });
  await t.waitForEvent("backend.loaded");
  return until("every event published", () => {
    const s = t.c.outbox.stats();
    return s.depth === 0 && s.inFlight === 0 && s.published > 0 && s.published;
  }, 60_000);
}

/** A request the server refuses: nats.js reports the permission violation, or (older paths) the request times out. */
async function refused(p: Promise<unknown>): Promise<string> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, "the server accepted it").toBeInstanceOf(Error);
  return (err as Error).message;
}

describe("least-privilege NATS users (deploy/nats-server.example.conf)", () => {
  it("the coordinator user can neither create nor change the audit stream or a consumer; the provisioner creates them, the coordinator publishes, the auditor reads", async () => {
    const provisioner = await as("provisioner", "_INBOX_provisioner");
    const pjsm = await jetstreamManager(provisioner.nc, { timeout: 5_000 });
    const log = recordingLogger();
    let published = 0;
    const seenIds: string[] = [];
    const t = await coordinator(log);
    try {
      // Not provisioned: the coordinator's attempt to create the stream is refused, and it says what to run.
      await until("the refusal logged", () => log.matching("warn", /warden nats provision/).length > 0, 60_000);
      expect(t.c.outbox.stats().published).toBe(0);
      const notFound = await pjsm.streams.info("WARDEN_EVENTS").catch((e: unknown) => e);
      expect(notFound instanceof JetStreamApiError && notFound.code === JetStreamApiCodes.StreamNotFound).toBe(true);

      // The provisioning step, as its own user and process.
      const p = await provision();
      expect(p.err).toBe("");
      expect(p.code).toBe(0);
      expect(p.out).toMatch(/^stream {2}WARDEN_EVENTS: created/m);
      expect(p.out).toMatch(/^durable WARDEN_EVENTS\/auditor: created/m);

      // The running coordinator notices on its next check and publishes what it kept.
      published += await publishSome(t);
      seenIds.push(...t.events.map((e) => e.id));
    } finally {
      await t.close();
    }
    // Provisioning again updates in place; a second coordinator start finds the stream as it needs it.
    const again = await provision();
    expect(again.code).toBe(0);
    expect(again.out).toMatch(/^stream {2}WARDEN_EVENTS: updated/m);
    expect(again.out).toMatch(/^durable WARDEN_EVENTS\/auditor: exists/m);
    const log2 = recordingLogger();
    const t2 = await coordinator(log2);
    try {
      published += await publishSome(t2);
      seenIds.push(...t2.events.map((e) => e.id));
      expect(log2.matching("info", /audit stream ready/).at(-1)?.meta).toMatchObject({ action: "found" });
      expect(log2.matching("warn", /drift/)).toEqual([]);
      expect(await t2.c.metricsRegistry.getSingleMetricAsString("warden_audit_stream_drift")).not.toMatch(/^warden_audit_stream_drift\{/m);
    } finally {
      await t2.close();
    }

    // The auditor reads everything both coordinators published, the events they emitted among them.
    const auditor = await as("auditor", "_INBOX_auditor");
    const read = await readAsAuditor(auditor.nc, published);
    expect(read).toHaveLength(published);
    expect(read.map((d) => d.event.id)).toEqual(expect.arrayContaining(seenIds));
    expect(read.map((d) => d.type)).toContain("node.registered");
    expect(auditor.violations).toEqual([]);

    // The coordinator identity: reading the stream's configuration works; changing it or any consumer is refused.
    const coord = await as("coordinator", defaultCoordinatorInboxPrefix);
    const cjsm = await jetstreamManager(coord.nc, { timeout: 2_000 });
    const before = await cjsm.streams.info("WARDEN_EVENTS");
    expect(before.config.subjects).toEqual(["warden.events.>"]);
    await refused(cjsm.streams.update("WARDEN_EVENTS", { max_msgs: 1 }));
    await refused(cjsm.streams.add({ ...before.config, max_msgs: 1 }));
    await refused(cjsm.consumers.update("WARDEN_EVENTS", "auditor", { max_ack_pending: 1 }));
    await refused(cjsm.consumers.add("WARDEN_EVENTS", { durable_name: "sneaky", ack_policy: AckPolicy.Explicit, filter_subject: "warden.events.>" }));
    const deniedForCoordinator = [
      "foo",
      "warden.other",
      "warden.eventsx.a",
      "$JS.API.STREAM.UPDATE.WARDEN_EVENTS",
      "$JS.API.STREAM.CREATE.WARDEN_EVENTS",
      "$JS.API.STREAM.DELETE.WARDEN_EVENTS",
      "$JS.API.STREAM.PURGE.WARDEN_EVENTS",
      "$JS.API.STREAM.CREATE.OTHER",
      "$JS.API.CONSUMER.CREATE.WARDEN_EVENTS.auditor.warden.events.>",
      "$JS.API.CONSUMER.DURABLE.CREATE.WARDEN_EVENTS.auditor",
      "$JS.API.CONSUMER.DELETE.WARDEN_EVENTS.auditor",
      "$JS.API.CONSUMER.MSG.NEXT.WARDEN_EVENTS.auditor",
      "$JS.ACK.WARDEN_EVENTS.auditor.1.1.1.1.1",
      "_INBOX_auditor.x",
    ];
    const violationsBefore = coord.violations.length;
    for (const s of deniedForCoordinator) coord.nc.publish(s, new Uint8Array([1]));
    // Replies are read on the coordinator's inbox only: reading the events is refused.
    coord.nc.subscribe("warden.events.>");
    coord.nc.subscribe("_INBOX.>");
    await coord.nc.flush();
    await until("every refusal reported", () => coord.violations.length >= violationsBefore + deniedForCoordinator.length + 2);
    expect(coord.violations.slice(violationsBefore)).toEqual([...deniedForCoordinator.map((s) => `publish ${s}`), "subscription warden.events.>", "subscription _INBOX.>"]);

    // The auditor only consumes: publishing events, touching the stream or changing its own durable is refused.
    const deniedForAuditor = [
      "warden.events.eviction.started.n.m",
      "$JS.API.STREAM.DELETE.WARDEN_EVENTS",
      "$JS.API.STREAM.UPDATE.WARDEN_EVENTS",
      "$JS.API.CONSUMER.CREATE.WARDEN_EVENTS.auditor.warden.events.>",
      "$JS.API.CONSUMER.CREATE.WARDEN_EVENTS.other.x",
      "foo",
    ];
    for (const s of deniedForAuditor) auditor.nc.publish(s, new Uint8Array([1]));
    auditor.nc.subscribe("warden.events.>");
    await auditor.nc.flush();
    await until("every auditor refusal reported", () => auditor.violations.length >= deniedForAuditor.length + 1);
    expect(auditor.violations).toEqual([...deniedForAuditor.map((s) => `publish ${s}`), "subscription warden.events.>"]);

    // Nothing refused took effect: the stream and the durable are as provisioned, every event still there.
    const after = await pjsm.streams.info("WARDEN_EVENTS");
    expect(after.config.max_msgs).toBe(-1);
    expect(after.state.messages).toBe(published);
    expect((await pjsm.consumers.info("WARDEN_EVENTS", "auditor")).config.max_ack_pending).toBe(1_000);
    await expect(pjsm.consumers.info("WARDEN_EVENTS", "sneaky")).rejects.toThrow();
  });

  it("a stream changed behind the coordinator's back is reported (warning and warden_audit_stream_drift) until provisioning puts it right", async () => {
    expect((await provision()).code).toBe(0);
    const provisioner = await as("provisioner", "_INBOX_provisioner");
    const pjsm = await jetstreamManager(provisioner.nc, { timeout: 5_000 });
    // Someone holding the provisioner's rights caps the stream.
    await pjsm.streams.update("WARDEN_EVENTS", { max_msgs: 1, allow_rollup_hdrs: true });

    const log = recordingLogger();
    const t = await coordinator(log);
    try {
      const warned = await until("the drift logged", () => log.matching("warn", /drifted/).at(0), 60_000);
      expect(warned.meta["drift"]).toBe("max_msgs 1 (want -1), allow_rollup_hdrs true (want false)");
      const metric = await t.c.metricsRegistry.getSingleMetricAsString("warden_audit_stream_drift");
      expect(metric).toContain('warden_audit_stream_drift{field="max_msgs",dangerous="false"} 1');
      expect(metric).toContain('warden_audit_stream_drift{field="allow_rollup_hdrs",dangerous="false"} 1');
      // Not dangerous: events still reach the stream (the operator decides), and the coordinator changed nothing.
      await publishSome(t);
      expect((await pjsm.streams.info("WARDEN_EVENTS")).config.max_msgs).toBe(1);
    } finally {
      await t.close();
    }

    const fixed = await provision();
    expect(fixed.code).toBe(0);
    const info = await pjsm.streams.info("WARDEN_EVENTS");
    expect([info.config.max_msgs, info.config.allow_rollup_hdrs]).toEqual([-1, false]);
    const log2 = recordingLogger();
    const t2 = await coordinator(log2);
    try {
      await until("ready", () => log2.matching("info", /audit stream ready/).length > 0, 60_000);
      expect(log2.matching("warn", /drifted/)).toEqual([]);
      expect(await t2.c.metricsRegistry.getSingleMetricAsString("warden_audit_stream_drift")).not.toMatch(/^warden_audit_stream_drift\{/m);
    } finally {
      await t2.close();
    }
  });
});
