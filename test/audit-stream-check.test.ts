/**
 * The coordinator's audit link checks the audit stream and never changes it
 * (a real nats-server without permissions, where it could): the operator's
 * limits stay as provisioned, and a stream that would not keep the events is
 * not published to — the link says why and waits — until it is fixed.
 */
import { afterEach, describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { RetentionPolicy, StorageType, jetstreamManager } from "@nats-io/jetstream";
import { EvictionStoppedSchema } from "@warden/proto";
import { createUlidFactory, seededRng, systemClock } from "@warden/common";
import { createEventFactory } from "@warden/events";
import { connectAudit, defaultAuditStreamName, ensureAuditStream, startAuditLink, type AuditLink } from "@warden/audit";
import { startNatsServer } from "./support/nats-server.js";
import { recordingLogger } from "./support/recording-logger.js";
import { until } from "./support/coordinator-harness.js";

const events = createEventFactory({ clock: systemClock, newId: createUlidFactory(systemClock, seededRng(11)), epoch: 1n });
const stopped = (incarnation: string) => events.create({ incarnation, payload: { case: "evictionStopped", value: create(EvictionStoppedSchema, {}) } });
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

async function setup(): Promise<{ url: string; jsm: Awaited<ReturnType<typeof jetstreamManager>>; admin: Awaited<ReturnType<typeof connectAudit>> }> {
  const nats = await startNatsServer();
  cleanups.push(() => nats.dispose());
  const admin = await connectAudit({ servers: nats.url });
  cleanups.push(() => admin.close());
  return { url: nats.url, jsm: await jetstreamManager(admin), admin };
}

function link(url: string): { l: AuditLink; log: ReturnType<typeof recordingLogger> } {
  const log = recordingLogger();
  const l = startAuditLink({ connection: { servers: url, reconnectTimeWaitMs: 50 }, retryBackoff: { initialMs: 20, factor: 1.5, maxMs: 200, jitter: 0.2 }, logger: log });
  cleanups.push(() => l.close());
  return { l, log };
}

describe("the coordinator's audit stream check", () => {
  it("leaves a provisioned stream's limits as they are (30 days stay 30 days) and reports no drift", async () => {
    const { url, jsm, admin } = await setup();
    await ensureAuditStream(admin, { maxAgeMs: 30 * 86_400_000, maxBytes: 1 << 30 });
    const { l, log } = link(url);
    await until("ready", () => l.state().status === "ready");
    await l.publisher.publish(stopped("A"), new AbortController().signal);
    const c = (await jsm.streams.info(defaultAuditStreamName)).config;
    expect([c.max_age, c.max_bytes]).toEqual([30 * 86_400_000 * 1_000_000, 1 << 30]);
    expect(l.streamDrift()).toEqual([]);
    expect(log.matching("warn", /drift/)).toEqual([]);
  });

  it("does not publish to a stream that would not keep the events (interest retention), says why, and publishes once it is fixed", async () => {
    const { url, jsm, admin } = await setup();
    // Interest retention with no consumer keeps nothing.
    await jsm.streams.add({ name: defaultAuditStreamName, subjects: ["warden.events.>"], storage: StorageType.File, retention: RetentionPolicy.Interest });
    const { l, log } = link(url);
    await until("refused", () => {
      const s = l.state();
      return s.status === "ensuring-stream" && s.attempts >= 2 && s.lastError?.includes("retention interest (want limits)");
    });
    expect(l.streamDrift().map((d) => [d.field, d.dangerous])).toEqual([["retention", true]]);
    await expect(l.publisher.publish(stopped("B"), new AbortController().signal)).rejects.toThrow(/not ready.*warden nats provision/);
    expect(log.matching("warn", /would not keep the events/).length).toBeGreaterThan(0);
    expect((await jsm.streams.info(defaultAuditStreamName)).config.retention).toBe(RetentionPolicy.Interest);

    // The operator's fix (retention cannot change in place): a new stream, provisioned.
    await jsm.streams.delete(defaultAuditStreamName);
    await ensureAuditStream(admin);
    await until("ready", () => l.state().status === "ready");
    expect(l.streamDrift()).toEqual([]);
    // A stream deleted and created again under its name can refuse the first publish for a moment
    // (nats-server 2.9.10, loaded machine: "error opening msg block file"); the outbox retries such a
    // refusal, and so does this. Stored once, whichever attempt it was. (Under two busy cores the
    // refusals outlasted 30 s once: the bound is generous, the outcome is what is checked.)
    let lastRefusal = "";
    await until("published", () =>
      l.publisher.publish(stopped("C"), new AbortController().signal).catch((err: unknown) => {
        if (!String(err).includes("JetStream refused the event")) throw err;
        lastRefusal = String(err);
        return undefined;
      }),
    120_000).catch((err: unknown) => {
      throw new Error(`${String(err)}; last refusal: ${lastRefusal}`);
    });
    expect((await jsm.streams.info(defaultAuditStreamName)).state.messages).toBe(1);
  }, 300_000);
});
