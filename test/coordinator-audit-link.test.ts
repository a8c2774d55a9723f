/**
 * The coordinator's `warden.audit` health and outbox against a real
 * nats-server that is down at start, refuses the credential, or comes back
 * without the stream: the coordinator serves throughout, events wait in the
 * outbox, and health says SERVING only once the stream is confirmed.
 */
import { afterEach, describe, expect, it } from "vitest";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { AdminService, Health, HealthCheckResponse_ServingStatus, NodeRegisteredSchema, type Event } from "@warden/proto";
import { createClient } from "@warden/grpc";
import { resolveCoordinatorConfig, startCoordinator, type Coordinator } from "@warden/coordinator";
import type { NatsCredentials } from "@warden/audit";
import { startNatsServer, type NatsServerHandle } from "./support/nats-server.js";
import { recordingLogger, type RecordingLogger } from "./support/recording-logger.js";
import { storedEvents } from "./support/audit-stream-reader.js";
import { until } from "./support/coordinator-harness.js";

const { SERVING, NOT_SERVING } = HealthCheckResponse_ServingStatus;
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

async function server(args: string[] = []): Promise<NatsServerHandle> {
  const s = await startNatsServer({ args });
  cleanups.push(() => s.dispose());
  return s;
}

async function tokenServer(token: string): Promise<{ nats: NatsServerHandle; setToken: (t: string) => Promise<void> }> {
  const confDir = await mkdtemp(join(tmpdir(), "warden-nats-conf-"));
  cleanups.push(() => rm(confDir, { recursive: true, force: true }));
  const conf = join(confDir, "nats.conf");
  const write = (t: string) => writeFile(conf, `authorization { token: "${t}" }\n`);
  await write(token);
  const nats = await server(["-c", conf]);
  return {
    nats,
    setToken: async (t) => {
      await nats.stop();
      await write(t);
      await nats.start();
    },
  };
}

interface Started {
  readonly c: Coordinator;
  readonly log: RecordingLogger;
  readonly auditHealth: () => Promise<HealthCheckResponse_ServingStatus>;
}

async function coordinator(nats: Record<string, string>): Promise<Started> {
  const dir = await mkdtemp(join(tmpdir(), "warden-coord-"));
  const log = recordingLogger();
  const c = await startCoordinator(resolveCoordinatorConfig({ listen: "127.0.0.1:0", stateDir: dir, embeddedAgent: false, models: [], nats }), { logger: log });
  const health = createClient(Health, c.address);
  cleanups.push(async () => {
    health.close();
    await c.close({ stopBackends: true });
    await rm(dir, { recursive: true, force: true });
  });
  return { c, log, auditHealth: async () => (await health.check({ service: "warden.audit" })).status };
}

async function emit(c: Coordinator, nodeId: string): Promise<Event> {
  const e = await c.hub.publish({ nodeId, payload: { case: "nodeRegistered", value: create(NodeRegisteredSchema, { labels: { test: "yes" } }) } });
  if (e === undefined) throw new Error("not journaled");
  return e;
}

async function onStream(url: string, id: string, credentials?: NatsCredentials): Promise<boolean> {
  return ((await storedEvents(url, credentials)) ?? []).some((e) => e.id === id);
}

describe("coordinator audit link", () => {
  it("starts while NATS is down: NOT_SERVING and events queued; once NATS is up: SERVING and the events are on the stream", async () => {
    const nats = await server();
    await nats.stop();
    const { c, log, auditHealth } = await coordinator({ url: nats.url });
    // The Admin API works meanwhile.
    const admin = createClient(AdminService, c.address);
    cleanups.push(async () => {
      admin.close();
      await Promise.resolve();
    });
    expect((await admin.listModels({})).instances).toEqual([]);
    expect(await auditHealth()).toBe(NOT_SERVING);
    const e = await emit(c, "n-down");
    expect(c.outbox.stats().depth).toBe(1);
    await until("the reason logged", () => log.matching("warn", /cannot connect to NATS.*connection refused/i).length > 0);
    expect(await auditHealth()).toBe(NOT_SERVING);

    await nats.start();
    await until("warden.audit SERVING", async () => (await auditHealth()) === SERVING);
    await until("outbox drained", () => c.outbox.stats().depth === 0);
    expect(await onStream(nats.url, e.id)).toBe(true);
  });

  it("with a wrong token: NOT_SERVING and a log line saying authorization violation; a server taking that token: SERVING, events arrive", async () => {
    const { nats, setToken } = await tokenServer("right");
    const { c, log, auditHealth } = await coordinator({ url: nats.url, token: "wrong" });
    const e = await emit(c, "n-auth");
    await until("authorization violation logged", () => log.matching("warn", /authorization violation/i).length > 0);
    expect(await auditHealth()).toBe(NOT_SERVING);
    expect(c.outbox.stats().depth).toBe(1);

    await setToken("wrong");
    await until("warden.audit SERVING", async () => (await auditHealth()) === SERVING);
    await until("outbox drained", () => c.outbox.stats().depth === 0);
    expect(await onStream(nats.url, e.id, { kind: "token", token: "wrong" })).toBe(true);
  });

  it("sets the stream up again after NATS restarts without its store, so later events are stored", async () => {
    const nats = await server();
    const { c, log, auditHealth } = await coordinator({ url: nats.url });
    await until("warden.audit SERVING", async () => (await auditHealth()) === SERVING);
    const before = await emit(c, "n-before");
    await until("first event stored", () => onStream(nats.url, before.id));

    await nats.kill();
    for (const f of await readdir(nats.storeDir)) await rm(join(nats.storeDir, f), { recursive: true, force: true });
    await nats.start();
    await until("stream created again", () => log.matching("info", /audit stream ready/).filter((l) => l.meta["action"] === "created").length >= 2);
    const after = await emit(c, "n-after");
    await until("outbox drained", () => c.outbox.stats().depth === 0);
    expect(await onStream(nats.url, after.id)).toBe(true);
    expect(await auditHealth()).toBe(SERVING);
  });
});
