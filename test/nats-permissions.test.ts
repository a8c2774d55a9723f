/**
 * The shipped least-privilege NATS config (services/coordinator/deploy/
 * nats-server.example.conf), as is, on a real nats-server: the real
 * coordinator, connecting as `coordinator` from its YAML config, creates the
 * audit stream, publishes its events and, restarted, confirms and updates the
 * stream; the `auditor` reads every one of them back through its durable.
 * Every other publish either identity tries is refused by the server
 * (a permission violation naming the subject), and the auditor can neither
 * publish events nor touch the stream.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fileURLToPath } from "node:url";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { connectAudit, subscribeAuditEvents, type AuditDelivery } from "@warden/audit";
import { defaultCoordinatorInboxPrefix } from "@warden/coordinator";
import { startNatsServer, type NatsServerHandle } from "./support/nats-server.js";
import { simModel, startTestCoordinator, until } from "./support/coordinator-harness.js";

const confPath = fileURLToPath(new URL("../services/coordinator/deploy/nats-server.example.conf", import.meta.url));
const passwords = { coordinator: "c-secret-1", auditor: "a-secret-2" };
let server: NatsServerHandle;
const connections: NatsConnection[] = [];

beforeAll(async () => {
  // The example takes its passwords from nats-server's environment (the spawned server inherits ours).
  process.env["WARDEN_NATS_COORDINATOR_PASSWORD"] = passwords.coordinator;
  process.env["WARDEN_NATS_AUDITOR_PASSWORD"] = passwords.auditor;
  server = await startNatsServer({ args: ["-c", confPath] });
});
afterAll(async () => {
  for (const nc of connections.splice(0)) await nc.close().catch(() => undefined);
  await server.dispose();
});

async function as(user: "coordinator" | "auditor", inboxPrefix: string): Promise<{ nc: NatsConnection; violations: string[] }> {
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

/** Reads the auditor's durable until `n` events arrived. */
async function readAsAuditor(nc: NatsConnection, n: number): Promise<AuditDelivery[]> {
  const ctl = new AbortController();
  const seen: AuditDelivery[] = [];
  const done = (async () => {
    for await (const d of subscribeAuditEvents(nc, { durable: "auditor", signal: ctl.signal })) {
      seen.push(d);
      if (seen.length >= n) break;
    }
  })();
  await done;
  ctl.abort();
  return seen;
}

describe("least-privilege NATS users (deploy/nats-server.example.conf)", () => {
  it("lets the real coordinator create and confirm its stream and publish, the auditor read, and refuses every other publish", async () => {
    const nats = { url: server.url, user: "coordinator", pass: passwords.coordinator };
    // First start: no stream yet (STREAM.INFO → not found → STREAM.CREATE), then its events.
    let expected = 0;
    const seenIds: string[] = [];
    const run = async (): Promise<void> => {
      const t = await startTestCoordinator({ models: [simModel("m")], extra: { nats } });
      try {
        // A load makes events after start-up's (node.registered) ones.
        await t.inference.predict({ model: "m", options: { Prompt: "hi" } });
        await t.waitForEvent("backend.loaded");
        await until("every event published", () => {
          const s = t.c.outbox.stats();
          return s.depth === 0 && s.inFlight === 0 && s.published > 0 && s.published;
        });
        expected += t.c.outbox.stats().published;
        seenIds.push(...t.events.map((e) => e.id));
      } finally {
        await t.close();
      }
    };
    await run();
    // Second start: the stream exists (STREAM.INFO → STREAM.UPDATE), and more events.
    await run();

    // The auditor reads everything both coordinators published, the events they emitted among them.
    const auditor = await as("auditor", "_INBOX_auditor");
    const read = await readAsAuditor(auditor.nc, expected);
    expect(read).toHaveLength(expected);
    expect(read.map((d) => d.event.id)).toEqual(expect.arrayContaining(seenIds));
    expect(read.map((d) => d.type)).toContain("node.registered");
    expect(auditor.violations).toEqual([]);

    // The coordinator identity: what it needs works, everything else is refused by the server.
    const coord = await as("coordinator", defaultCoordinatorInboxPrefix);
    const jsm = await jetstreamManager(coord.nc, { timeout: 2_000 });
    expect((await jsm.streams.info("WARDEN_EVENTS")).config.subjects).toEqual(["warden.events.>"]);
    const deniedForCoordinator = [
      "foo",
      "warden.other",
      "warden.eventsx.a",
      "$JS.API.STREAM.DELETE.WARDEN_EVENTS",
      "$JS.API.STREAM.PURGE.WARDEN_EVENTS",
      "$JS.API.STREAM.CREATE.OTHER",
      "$JS.API.CONSUMER.CREATE.WARDEN_EVENTS.sneaky",
      "$JS.API.CONSUMER.MSG.NEXT.WARDEN_EVENTS.auditor",
      "$JS.ACK.WARDEN_EVENTS.auditor.1.1.1.1.1",
      "_INBOX_auditor.x",
    ];
    for (const s of deniedForCoordinator) coord.nc.publish(s, new Uint8Array([1]));
    // Replies are read on the coordinator's inbox only: reading the events is refused.
    coord.nc.subscribe("warden.events.>");
    coord.nc.subscribe("_INBOX.>");
    await coord.nc.flush();
    await until("every refusal reported", () => coord.violations.length >= deniedForCoordinator.length + 2);
    expect(coord.violations).toEqual([...deniedForCoordinator.map((s) => `publish ${s}`), "subscription warden.events.>", "subscription _INBOX.>"]);

    // The auditor identity only consumes: publishing events or touching the stream is refused.
    const deniedForAuditor = ["warden.events.eviction.started.n.m", "$JS.API.STREAM.DELETE.WARDEN_EVENTS", "$JS.API.STREAM.UPDATE.WARDEN_EVENTS", "$JS.API.CONSUMER.CREATE.WARDEN_EVENTS.other.x", "foo"];
    for (const s of deniedForAuditor) auditor.nc.publish(s, new Uint8Array([1]));
    auditor.nc.subscribe("warden.events.>");
    await auditor.nc.flush();
    await until("every auditor refusal reported", () => auditor.violations.length >= deniedForAuditor.length + 1);
    expect(auditor.violations).toEqual([...deniedForAuditor.map((s) => `publish ${s}`), "subscription warden.events.>"]);

    // Nothing refused reached the stream.
    expect((await jsm.streams.info("WARDEN_EVENTS")).state.messages).toBe(expected);
  });
});
