/**
 * The JetStream publisher on its own, against a real nats-server on a random
 * loopback port: acks matched on one wildcard subscription, de-duplication by
 * Nats-Msg-Id, refusals that say what is wrong, ack timeouts, and a reconnect
 * failing the acks it orphaned and waking the outbox. No elapsed-time asserts:
 * a wait that should not happen is given a long timeout, so taking it fails the
 * test instead of passing slowly.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import type { Socket } from "node:net";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Code, WardenError, createUlidFactory, cryptoRng, isWardenError, systemClock } from "@warden/common";
import { createEventFactory } from "@warden/events";
import { EvictionReason, EvictionStartedSchema, type Event } from "@warden/proto";
import { connectAudit, createNatsPublisher, defaultAuditStreamName, ensureAuditStream } from "@warden/audit";
import { startNatsServer, type NatsServerHandle } from "./support/nats-server.js";

let server: NatsServerHandle;
let nc: NatsConnection;
const never = new AbortController().signal;
const factory = createEventFactory({ clock: systemClock, newId: createUlidFactory(systemClock, cryptoRng), epoch: 1n });
const event = (incarnation: string): Event =>
  factory.create({ nodeId: "n1", model: "m.1", incarnation, address: "127.0.0.1:1", payload: { case: "evictionStarted", value: create(EvictionStartedSchema, { reason: EvictionReason.LRU }) } });

beforeAll(async () => {
  server = await startNatsServer();
});
afterAll(async () => {
  await server.dispose();
});
beforeEach(async () => {
  if (!server.running()) await server.start();
  nc = await connectAudit({ servers: server.url, reconnectTimeWaitMs: 50 });
  const jsm = await jetstreamManager(nc);
  for (const name of [defaultAuditStreamName, "OTHER"]) await jsm.streams.delete(name).catch(() => false);
  await ensureAuditStream(nc);
});
afterEach(async () => {
  await nc.close().catch(() => undefined);
});

describe("createNatsPublisher", () => {
  it("acks many publishes in flight with their stream sequences, and a repeated id as a duplicate", async () => {
    const p = createNatsPublisher(nc);
    const events = Array.from({ length: 300 }, (_, i) => event(`I${String(i)}`));
    const acks = await Promise.all(events.map((e) => p.publish(e, never)));
    expect(acks.every((a) => !a.duplicate)).toBe(true);
    expect(new Set(acks.map((a) => a.streamSequence)).size).toBe(300);
    const again = await p.publish(events[7] ?? event("x"), never);
    expect(again).toEqual({ duplicate: true, streamSequence: acks[7]?.streamSequence });
    const info = await (await jetstreamManager(nc)).streams.info(defaultAuditStreamName);
    expect(info.state.messages).toBe(300);
    p.close();
    // Refused, not sent: the audit link closes the publisher before the connection.
    await expect(p.publish(event("late"), never)).rejects.toThrow(/publisher closed/);
  });

  it("no stream on the subjects is UNAVAILABLE at once (no responders), not an ack timeout", async () => {
    await (await jetstreamManager(nc)).streams.delete(defaultAuditStreamName);
    const p = createNatsPublisher(nc, { ackTimeoutMs: 600_000 });
    const err = await p.publish(event("a"), never).catch((e: unknown) => e);
    expect(isWardenError(err, Code.Unavailable)).toBe(true);
    expect((err as WardenError).rawMessage).toMatch(/no stream/);
    p.close();
  });

  it("an event stored by another stream is FAILED_PRECONDITION naming both streams", async () => {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.delete(defaultAuditStreamName);
    await jsm.streams.add({ name: "OTHER", subjects: ["warden.events.>"] });
    const p = createNatsPublisher(nc);
    const err = await p.publish(event("a"), never).catch((e: unknown) => e);
    expect(isWardenError(err, Code.FailedPrecondition)).toBe(true);
    expect((err as WardenError).rawMessage).toContain(`"OTHER", not "${defaultAuditStreamName}"`);
    p.close();
  });

  it("an ack that never comes is DEADLINE_EXCEEDED after the ack timeout", async () => {
    const p = createNatsPublisher(nc, { ackTimeoutMs: 200, sweepEveryMs: 20 });
    await server.stop();
    const err = await p.publish(event("a"), never).catch((e: unknown) => e);
    expect(isWardenError(err, Code.DeadlineExceeded)).toBe(true);
    p.close();
  });

  it("a reconnect fails the acks it orphaned, then signals ready; publishing works again", async () => {
    const p = createNatsPublisher(nc, { ackTimeoutMs: 600_000 });
    const order: string[] = [];
    const unsubscribe = p.onReady((): void => {
      order.push("ready");
    });
    await server.stop();
    const orphaned = p.publish(event("a"), never).catch((e: unknown) => {
      order.push("rejected");
      return e;
    });
    await server.start();
    const err = await orphaned;
    expect(isWardenError(err, Code.Unavailable)).toBe(true);
    await expect.poll(() => order, { timeout: 30_000 }).toEqual(["rejected", "ready"]);
    unsubscribe();
    // The stream may need a moment after the restart; the outbox would retry, so does this loop.
    let ack;
    for (let i = 0; i < 100 && ack === undefined; i++) ack = await p.publish(event("b"), never).catch(() => new Promise((r) => setTimeout(r, 100)).then(() => undefined));
    expect(ack).toMatchObject({ duplicate: false });
    p.close();
  });

  it("a connection closed for good fails what is pending, and later publishes at once", async () => {
    const p = createNatsPublisher(nc, { ackTimeoutMs: 600_000 });
    await server.stop();
    const pending = p.publish(event("a"), never).catch((e: unknown) => e);
    await nc.close();
    const err = await pending;
    expect(isWardenError(err, Code.Unavailable)).toBe(true);
    expect((err as WardenError).rawMessage).toMatch(/closed/);
    await expect(p.publish(event("b"), never)).rejects.toThrow(/closed/);
  });

  it("a publish flushed into a socket the server hung up on, with a close right after, fails the ack and throws nothing", async () => {
    // nats.js 3.4.0 kept writing to a socket Node had already ended after the
    // server's FIN, and its close stripped the socket's 'error' listener before
    // Node emitted the write error: an uncaught "write after end" (a crashed
    // coordinator). The socket is read only to wait for that half-closed state
    // (the window lasts a few event-loop turns), so the order is not left to luck.
    const uncaught: unknown[] = [];
    const record = (err: unknown): void => {
      uncaught.push(err);
    };
    process.on("uncaughtException", record);
    try {
      const p = createNatsPublisher(nc, { ackTimeoutMs: 600_000 });
      const socket = (nc as unknown as { protocol: { transport: { socket: Socket } } }).protocol.transport.socket;
      const halfClosed = new Promise<void>((resolve) => {
        socket.once("end", () => {
          const check = (): void => {
            if (socket.writable) process.nextTick(check);
            else resolve();
          };
          check();
        });
      });
      // Not awaited: the server's exit may come after the window.
      const stopping = server.stop();
      await halfClosed;
      expect(socket.destroyed).toBe(false);
      const pending = p.publish(event("a"), never).catch((e: unknown) => e);
      const closing = nc.close();
      expect(isWardenError(await pending, Code.Unavailable)).toBe(true);
      await closing;
      await stopping;
      // A throw queued by the close would come on the next ticks: let them run.
      await new Promise((r) => setImmediate(r));
      expect(uncaught).toEqual([]);
    } finally {
      process.off("uncaughtException", record);
    }
  });

  it("close fails what is pending and an aborted signal refuses a publish", async () => {
    const p = createNatsPublisher(nc, { ackTimeoutMs: 600_000 });
    await server.stop();
    const pending = p.publish(event("a"), never).catch((e: unknown) => e);
    p.close();
    expect(isWardenError(await pending, Code.Unavailable)).toBe(true);
    const ctl = new AbortController();
    ctl.abort(new WardenError(Code.Canceled, "outbox closed"));
    await expect(p.publish(event("b"), ctl.signal)).rejects.toThrow(/outbox closed/);
  });
});
