/**
 * The audit publish fence against a real 3-server JetStream cluster: two
 * publishers of different leader epochs write the audit stream. The older
 * one's connection runs through a TCP relay that the test holds, so a publish
 * it handed to the NATS client is flushed only after the newer one has
 * published — what a leader paused (SIGSTOP) right after a publish and resumed
 * after its successor's first events does. A plain JetStream consumer then
 * reads the stream: no older leader epoch after a newer one, nothing of the
 * newer lost, no id twice.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect as tcpConnect, createServer, type Server, type Socket } from "node:net";
import { create } from "@bufbuild/protobuf";
import type { NatsConnection } from "@nats-io/transport-node";
import { DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Code, createUlidFactory, cryptoRng, isWardenError, systemClock } from "@warden/common";
import { createEventFactory, decodeEvent } from "@warden/events";
import { EvictionReason, EvictionStartedSchema, type Event } from "@warden/proto";
import { connectAudit, createNatsPublisher, defaultAuditStreamName, ensureAuditStream } from "@warden/audit";
import { startNatsCluster, type NatsClusterHandle } from "./support/nats-cluster.js";

const never = new AbortController().signal;

/** A relay to one server whose client→server direction the test can hold (the bytes wait, as in a stopped process's socket buffer). */
interface HeldRelay {
  readonly url: string;
  hold(): void;
  release(): void;
  close(): Promise<void>;
}

async function startRelay(port: number): Promise<HeldRelay> {
  const clients = new Set<Socket>();
  let held = false;
  const server: Server = createServer((client) => {
    clients.add(client);
    const upstream = tcpConnect({ host: "127.0.0.1", port });
    if (held) client.pause();
    client.pipe(upstream);
    upstream.pipe(client);
    const end = (): void => {
      clients.delete(client);
      client.destroy();
      upstream.destroy();
    };
    client.on("error", end).on("close", end);
    upstream.on("error", end).on("close", end);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const addr = server.address();
  if (addr === null || typeof addr === "string") throw new Error("relay has no port");
  return {
    url: `nats://127.0.0.1:${String(addr.port)}`,
    hold() {
      held = true;
      for (const c of clients) c.pause();
    },
    release() {
      held = false;
      for (const c of clients) c.resume();
    },
    async close() {
      for (const c of clients) c.destroy();
      await new Promise<void>((resolve) => {
        server.close(() => {
          resolve();
        });
      });
    },
  };
}

function eventsOf(leaderEpoch: bigint) {
  const factory = createEventFactory({ clock: systemClock, newId: createUlidFactory(systemClock, cryptoRng), epoch: leaderEpoch, leaderEpoch });
  return (incarnation: string): Event =>
    factory.create({ nodeId: "n1", model: "m.1", incarnation, address: "127.0.0.1:1", payload: { case: "evictionStarted", value: create(EvictionStartedSchema, { reason: EvictionReason.LRU }) } });
}

/** Every event the stream holds, read by a plain ordered JetStream consumer (not the coordinator's code). */
async function consumeAll(nc: NatsConnection): Promise<Event[]> {
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(defaultAuditStreamName);
  const consumer = await jetstream(nc).consumers.get(defaultAuditStreamName, { deliver_policy: DeliverPolicy.All });
  const out: Event[] = [];
  if (info.state.messages === 0) return out;
  const msgs = await consumer.consume();
  for await (const m of msgs) {
    out.push(decodeEvent(m.data));
    if (m.seq >= info.state.last_seq) break;
  }
  return out;
}

let cluster: NatsClusterHandle;
let admin: NatsConnection;

beforeAll(async () => {
  cluster = await startNatsCluster();
  admin = await connectAudit({ servers: [...cluster.urls] });
  await ensureAuditStream(admin, { replicas: 3 });
}, 120_000);

afterAll(async () => {
  await admin.close().catch(() => undefined);
  await cluster.stop();
});

describe("audit publish fence (3-server JetStream)", () => {
  it("an ex-leader's publish flushed after its successor's events is refused; the stream shows no older epoch after a newer one", async () => {
    const jsm = await jetstreamManager(admin);
    await jsm.streams.purge(defaultAuditStreamName);
    const first = cluster.servers[0];
    if (first === undefined) throw new Error("no server");
    const relay = await startRelay(first.port);
    const oldConn = await connectAudit({ servers: relay.url });
    const newConn = await connectAudit({ servers: [...cluster.urls] });
    const superseded: bigint[] = [];
    const oldLeader = createNatsPublisher(oldConn, { fence: { writerEpoch: () => 1n, onSuperseded: (newer) => superseded.push(newer) } });
    const newLeader = createNatsPublisher(newConn, { fence: { writerEpoch: () => 2n } });
    const older = eventsOf(1n);
    const newer = eventsOf(2n);
    try {
      const before = [older("a1"), older("a2"), older("a3")];
      for (const e of before) await oldLeader.publish(e, never);

      // Handed to the client, then the process "stops": the bytes wait in the relay.
      relay.hold();
      const late = older("a4");
      const lateAck = oldLeader.publish(late, never).then(
        () => "stored",
        (err: unknown) => err,
      );

      // The successor takes over and publishes (pipelined).
      const mine = ["b1", "b2", "b3", "b4", "b5"].map(newer);
      const acks = await Promise.all(mine.map((e) => newLeader.publish(e, never)));
      expect(acks.every((a) => !a.duplicate)).toBe(true);

      // "SIGCONT": the held publish reaches the stream now.
      relay.release();
      const outcome = await lateAck;
      expect(outcome).not.toBe("stored");

      // Asked again (the outbox's retry), the ex-leader reads the head, sees a newer epoch, and is refused for good.
      const again = await oldLeader.publish(late, never).then(
        () => "stored",
        (err: unknown) => err,
      );
      expect(isWardenError(again, Code.FailedPrecondition)).toBe(true);
      expect(superseded).toEqual([2n]);

      const seen = await consumeAll(admin);
      const ids = seen.map((e) => e.incarnation);
      expect(ids).toEqual(["a1", "a2", "a3", "b1", "b2", "b3", "b4", "b5"]);
      let newest = 0n;
      for (const e of seen) {
        expect(e.leaderEpoch).toBeGreaterThanOrEqual(newest);
        newest = e.leaderEpoch;
      }
      expect(new Set(seen.map((e) => e.id)).size).toBe(seen.length);
    } finally {
      oldLeader.close();
      newLeader.close();
      await oldConn.close().catch(() => undefined);
      await newConn.close().catch(() => undefined);
      await relay.close();
    }
  }, 60_000);

  it("a leader's own failed publish is re-sent behind the stream's head, and one already stored is not stored twice", async () => {
    const jsm = await jetstreamManager(admin);
    await jsm.streams.purge(defaultAuditStreamName);
    const conn = await connectAudit({ servers: [...cluster.urls] });
    const p = createNatsPublisher(conn, { fence: { writerEpoch: () => 3n } });
    const ev = eventsOf(3n);
    try {
      const a = [ev("c1"), ev("c2"), ev("c3")];
      for (const e of a) await p.publish(e, never);
      // A writer without a fence (no epoch) slips one in: our chain breaks once.
      const other = await connectAudit({ servers: [...cluster.urls] });
      const foreign = createNatsPublisher(other);
      await foreign.publish(eventsOf(0n)("x1"), never);
      foreign.close();
      await other.close();
      const next = ev("c4");
      await expect(p.publish(next, never)).rejects.toThrow(/wrong last msg/i);
      // Retried (as the outbox does): behind the head now, and a re-sent stored event is a duplicate.
      expect((await p.publish(next, never)).duplicate).toBe(false);
      expect((await p.publish(a[2] ?? next, never)).duplicate).toBe(true);
      const seen = (await consumeAll(admin)).map((e) => e.incarnation);
      expect(seen).toEqual(["c1", "c2", "c3", "x1", "c4"]);
    } finally {
      p.close();
      await conn.close().catch(() => undefined);
    }
  }, 60_000);
});
