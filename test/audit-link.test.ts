/**
 * The audit link against a real nats-server: down at start, wrong credential,
 * a restart that lost the stream, and close() while retrying.
 */
import { afterEach, describe, expect, it } from "vitest";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { EvictionStoppedSchema } from "@warden/proto";
import { ManualClock, createUlidFactory, seededRng, systemClock } from "@warden/common";
import { createEventFactory } from "@warden/events";
import { startAuditLink, type AuditLink, type AuditLinkState } from "@warden/audit";
import { startNatsServer, type NatsServerHandle } from "./support/nats-server.js";
import { recordingLogger } from "./support/recording-logger.js";
import { storedEvents } from "./support/audit-stream-reader.js";
import { until } from "./support/coordinator-harness.js";

const fastRetry = { initialMs: 20, factor: 1.5, maxMs: 200, jitter: 0.2 };
const events = createEventFactory({ clock: systemClock, newId: createUlidFactory(systemClock, seededRng(7)), epoch: 1n });
const stoppedEvent = (incarnation: string) => events.create({ incarnation, payload: { case: "evictionStopped", value: create(EvictionStoppedSchema, {}) } });

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

async function server(args: string[] = []): Promise<NatsServerHandle> {
  const s = await startNatsServer({ args });
  cleanups.push(() => s.dispose());
  return s;
}

function link(url: string, extra: Partial<Parameters<typeof startAuditLink>[0]> = {}): { link: AuditLink; states: AuditLinkState[]; log: ReturnType<typeof recordingLogger> } {
  const log = recordingLogger();
  const states: AuditLinkState[] = [];
  const l = startAuditLink({
    connection: { servers: url, reconnectTimeWaitMs: 50, connectTimeoutMs: 2_000 },
    retryBackoff: fastRetry,
    logger: log,
    onStateChange: (s) => states.push(s),
    ...extra,
  });
  cleanups.push(() => l.close());
  return { link: l, states, log };
}

const signal = new AbortController().signal;

describe("audit link", () => {
  it("keeps retrying a server that is down at start, logs the reason once, and is ready (stream created) once it is up", async () => {
    const nats = await server();
    await nats.stop();
    const { link: l, log } = link(nats.url);
    await until("several failed connects", () => {
      const s = l.state();
      return s.status === "connecting" && s.attempts >= 4;
    });
    await expect(l.publisher.publish(stoppedEvent("A"), signal)).rejects.toThrow(/unavailable.*not ready.*connection refused/i);
    // Same reason every time: logged once, not once per attempt.
    expect(log.matching("warn", /cannot connect to NATS.*connection refused/i)).toHaveLength(1);

    await nats.start();
    await until("ready", () => l.state().status === "ready");
    const ack = await l.publisher.publish(stoppedEvent("B"), signal);
    expect(ack.duplicate).toBe(false);
    expect((await storedEvents(nats.url))?.map((e) => e.incarnation)).toEqual(["B"]);
  });

  it("with a wrong token is not ready and says authorization violation; a server accepting that token makes it ready", async () => {
    const confDir = await mkdtemp(join(tmpdir(), "warden-nats-conf-"));
    cleanups.push(() => rm(confDir, { recursive: true, force: true }));
    const conf = join(confDir, "nats.conf");
    await writeFile(conf, `authorization { token: "right" }\n`);
    const nats = await server(["-c", conf]);
    const { link: l, log } = link(nats.url, { connection: { servers: nats.url, credentials: { kind: "token", token: "wrong" }, reconnectTimeWaitMs: 50 } });
    await until("auth failures", () => {
      const s = l.state();
      return s.status === "connecting" && s.attempts >= 3;
    });
    expect(l.state()).toMatchObject({ status: "connecting", lastError: expect.stringMatching(/authorization violation/i) as unknown });
    const said = log.matching("warn", /authorization violation/i);
    expect(said).toHaveLength(1);
    expect(said[0]?.msg).toMatch(/credentials/);

    await nats.stop();
    await writeFile(conf, `authorization { token: "wrong" }\n`);
    await nats.start();
    await until("ready with the token now accepted", () => l.state().status === "ready");
    await l.publisher.publish(stoppedEvent("T"), signal);
    expect((await storedEvents(nats.url, { kind: "token", token: "wrong" }))?.map((e) => e.incarnation)).toEqual(["T"]);
  });

  it("starts over with a new connection when nats.js gives up reconnecting (credential refused after a restart)", async () => {
    const confDir = await mkdtemp(join(tmpdir(), "warden-nats-conf-"));
    cleanups.push(() => rm(confDir, { recursive: true, force: true }));
    const conf = join(confDir, "nats.conf");
    await writeFile(conf, `authorization { token: "mine" }\n`);
    const nats = await server(["-c", conf]);
    const { link: l, log } = link(nats.url, { connection: { servers: nats.url, credentials: { kind: "token", token: "mine" }, reconnectTimeWaitMs: 50 } });
    await until("ready", () => l.state().status === "ready");
    const first = l.connection();

    await nats.stop();
    await writeFile(conf, `authorization { token: "rotated" }\n`);
    await nats.start();
    await until("the old connection given up and a new connect refused", () => first?.isClosed() === true && l.state().status === "connecting" && log.matching("warn", /cannot connect to NATS.*authorization violation/i).length > 0);

    await nats.stop();
    await writeFile(conf, `authorization { token: "mine" }\n`);
    await nats.start();
    await until("ready on a new connection", () => l.state().status === "ready");
    expect(l.connection()).not.toBe(first);
    await l.publisher.publish(stoppedEvent("R"), signal);
    expect((await storedEvents(nats.url, { kind: "token", token: "mine" }))?.map((e) => e.incarnation)).toContain("R");
  });

  it("sets the stream up again after a reconnect to a server that lost it", async () => {
    const nats = await server();
    const { link: l, states, log } = link(nats.url);
    await until("ready", () => l.state().status === "ready");
    await l.publisher.publish(stoppedEvent("before"), signal);
    const readyBefore = states.filter((s) => s.status === "ready").length;

    await nats.kill();
    for (const f of await readdir(nats.storeDir)) await rm(join(nats.storeDir, f), { recursive: true, force: true });
    await nats.start();
    await until("ready again on the new server", () => l.state().status === "ready" && states.filter((s) => s.status === "ready").length > readyBefore);
    expect(states.map((s) => s.status)).toContain("disconnected");
    expect(log.matching("info", /audit stream ready/).at(-1)?.meta).toMatchObject({ action: "created" });
    await l.publisher.publish(stoppedEvent("after"), signal);
    expect((await storedEvents(nats.url))?.map((e) => e.incarnation)).toEqual(["after"]);
  });

  it("close() while retrying cancels the backoff timer and stops connecting", async () => {
    const nats = await server();
    await nats.stop();
    const clock = new ManualClock();
    const { link: l, log } = link(nats.url, { clock, rng: seededRng(3) });
    await until("first failure, waiting on the clock", () => l.state().status === "connecting" && clock.pendingTimers() === 1);
    clock.advance(10_000);
    await until("second failure", () => {
      const s = l.state();
      return s.status === "connecting" && s.attempts === 2 && clock.pendingTimers() === 1;
    });
    await l.close();
    expect(clock.pendingTimers()).toBe(0);
    expect(l.state().status).toBe("closed");
    const linesAtClose = log.lines.length;
    await nats.start();
    clock.advance(60_000);
    await new Promise((r) => setTimeout(r, 200)); // nothing may happen; give it the chance to
    expect(l.state().status).toBe("closed");
    expect(l.connection()).toBeUndefined();
    expect(log.lines.length).toBe(linesAtClose);
  });

  it("close() when connected closes the connection", async () => {
    const nats = await server();
    const { link: l } = link(nats.url);
    await until("ready", () => l.state().status === "ready");
    const nc = l.connection();
    await l.close();
    expect(nc?.isClosed()).toBe(true);
    await expect(l.publisher.publish(stoppedEvent("late"), signal)).rejects.toThrow(/closed/);
  });

  it("close() while nats.js is reconnecting closes the connection and resolves", async () => {
    const nats = await server();
    const { link: l } = link(nats.url);
    await until("ready", () => l.state().status === "ready");
    const nc = l.connection();
    await nats.stop();
    await until("disconnected", () => l.state().status === "disconnected");
    await l.close();
    expect(nc?.isClosed()).toBe(true);
    expect(l.state().status).toBe("closed");
  });
});
