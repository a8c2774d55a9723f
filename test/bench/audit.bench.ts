/**
 * Audit pipeline throughput: events/s through file journal (group commit) +
 * outbox (512 acks in flight) + JetStream publisher, against baselines measured
 * on the same spawned nats-server in the same run:
 *  1. publishing each event and awaiting its ack before the next (the naive relay);
 *  2. raw pipelined JetStream publishing of the same payloads, 512 in flight, no journal;
 *  3. time to drain 6 000 events buffered during an outage once NATS is back,
 *     against raw pipelined publishing of 6 000 events.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { EvictionReason, EvictionStartedSchema, type Event } from "@warden/proto";
import { createUlidFactory, cryptoRng, systemClock } from "@warden/common";
import { createEventFactory, encodeEvent, subjectForEvent, type EventInit } from "@warden/events";
import { createOutbox } from "@warden/outbox";
import { openFileJournal } from "@warden/journal";
import { connectAudit, createNatsPublisher, defaultAuditStreamName, ensureAuditStream } from "@warden/audit";
import { startNatsServer, type NatsServerHandle } from "../support/nats-server.js";
import { median, type BenchResult } from "./bench-result.js";

const eventsPerRun = 20_000;
const outageEvents = 6_000;
const rounds = 3;

function init(i: number): EventInit {
  return {
    nodeId: `gpu-node-${i % 8}`,
    model: `model-${i % 32}`,
    address: "10.0.0.7:40123",
    incarnation: `INC${i % 512}`,
    payload: {
      case: "evictionStarted",
      value: create(EvictionStartedSchema, { reason: EvictionReason.LRU, trigger: "load of llama-70b", openRequestIds: ["req-1", "req-2"] }),
    },
  };
}

async function freshStream(nc: NatsConnection): Promise<void> {
  const jsm = await jetstreamManager(nc);
  await jsm.streams.delete(defaultAuditStreamName).catch(() => false);
  await ensureAuditStream(nc);
}

async function waitUntil(cond: () => boolean, deadlineMs = 120_000): Promise<void> {
  const until = performance.now() + deadlineMs;
  while (!cond()) {
    if (performance.now() > until) throw new Error("bench: timed out");
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** Events/s through journal + outbox + JetStream, appends issued concurrently as a busy coordinator would. */
async function oursRun(nc: NatsConnection, dir: string, n: number): Promise<number> {
  const journal = await openFileJournal({ path: join(dir, `j-${performance.now()}.wj`) });
  const outbox = createOutbox({
    journal,
    publisher: createNatsPublisher(nc),
    clock: systemClock,
    rng: cryptoRng,
    newId: createUlidFactory(systemClock, cryptoRng),
  });
  await outbox.start();
  const t0 = performance.now();
  const appends: Promise<unknown>[] = [];
  for (let i = 0; i < n; i++) {
    appends.push(outbox.emit(init(i)));
    // Yield now and then so group commit and acks proceed while appending.
    if (i % 1_000 === 999) await Promise.all(appends.splice(0));
  }
  await Promise.all(appends);
  await waitUntil(() => outbox.stats().depth === 0);
  const elapsedMs = performance.now() - t0;
  await outbox.close();
  await journal.close();
  return (n / elapsedMs) * 1000;
}

function makeEvents(n: number): Event[] {
  const factory = createEventFactory({ clock: systemClock, newId: createUlidFactory(systemClock, cryptoRng), epoch: 1n });
  return Array.from({ length: n }, (_, i) => factory.create(init(i)));
}

async function sequentialRun(nc: NatsConnection, events: readonly Event[]): Promise<number> {
  const js = jetstream(nc);
  const t0 = performance.now();
  for (const e of events) await js.publish(subjectForEvent(e), encodeEvent(e), { msgID: e.id });
  return (events.length / (performance.now() - t0)) * 1000;
}

async function pipelinedRunMs(nc: NatsConnection, events: readonly Event[], inFlight = 512): Promise<number> {
  const js = jetstream(nc);
  const t0 = performance.now();
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < events.length) {
      const e = events[next++];
      if (e !== undefined) await js.publish(subjectForEvent(e), encodeEvent(e), { msgID: e.id });
    }
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
  return performance.now() - t0;
}

/** ms from NATS coming back to an empty outbox, for `n` events appended during the outage. */
async function drainAfterOutageMs(server: NatsServerHandle, nc: NatsConnection, dir: string, n: number): Promise<number> {
  const journal = await openFileJournal({ path: join(dir, "outage.wj") });
  const outbox = createOutbox({
    journal,
    publisher: createNatsPublisher(nc, { ackTimeoutMs: 1_000 }),
    clock: systemClock,
    rng: cryptoRng,
    newId: createUlidFactory(systemClock, cryptoRng),
  });
  await outbox.start();
  await server.stop();
  const appends: Promise<unknown>[] = [];
  for (let i = 0; i < n; i++) appends.push(outbox.emit(init(i)));
  await Promise.all(appends);
  await server.start();
  const t0 = performance.now();
  await waitUntil(() => outbox.stats().depth === 0);
  const ms = performance.now() - t0;
  await outbox.close();
  await journal.close();
  return ms;
}

export async function run(): Promise<BenchResult[]> {
  const server = await startNatsServer();
  const dir = await mkdtemp(join(tmpdir(), "warden-bench-outbox-"));
  const nc = await connectAudit({ servers: server.url, reconnectTimeWaitMs: 100 });
  try {
    await freshStream(nc);
    await oursRun(nc, dir, 2_000); // warm-up (JIT, file store)
    await sequentialRun(nc, makeEvents(500));

    // Interleaved rounds, medians: the machine is shared, so single runs are noisy.
    const oursRuns: number[] = [];
    const sequentialRuns: number[] = [];
    const pipelinedRuns: number[] = [];
    for (let round = 0; round < rounds; round++) {
      await freshStream(nc);
      oursRuns.push(await oursRun(nc, dir, eventsPerRun));
      await freshStream(nc);
      sequentialRuns.push(await sequentialRun(nc, makeEvents(eventsPerRun / 4)));
      await freshStream(nc);
      pipelinedRuns.push((eventsPerRun / (await pipelinedRunMs(nc, makeEvents(eventsPerRun)))) * 1000);
    }
    const ours = median(oursRuns);
    const sequential = median(sequentialRuns);
    const pipelined = median(pipelinedRuns);

    await freshStream(nc);
    const drainMs = await drainAfterOutageMs(server, nc, dir, outageEvents);
    await freshStream(nc);
    const rawMs = await pipelinedRunMs(nc, makeEvents(outageEvents));

    return [
      {
        name: `events/s: file journal + outbox + JetStream, ${eventsPerRun} events, median of ${rounds}`,
        baseline: "publish each event, await its ack",
        ours,
        baselineValue: sequential,
        unit: "events/s",
        higherIsBetter: true,
      },
      {
        name: `events/s: file journal + outbox + JetStream, ${eventsPerRun} events, median of ${rounds}`,
        baseline: "raw pipelined JetStream publish, 512 in flight, no journal",
        ours,
        baselineValue: pipelined,
        unit: "events/s",
        higherIsBetter: true,
      },
      {
        name: `drain ${outageEvents} events buffered during an outage, from NATS restart`,
        baseline: `raw pipelined publish of ${outageEvents} events on a live server`,
        ours: drainMs,
        baselineValue: rawMs,
        unit: "ms",
        higherIsBetter: false,
      },
    ];
  } finally {
    await nc.close();
    await server.dispose();
    await rm(dir, { recursive: true, force: true });
  }
}
