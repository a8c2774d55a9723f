/**
 * Cost of the HA audit publish fence: events/s through the JetStream publisher
 * with every publish conditional on the stream's last message (one head read,
 * then `Nats-Expected-Last-Msg-Id` chained, 512 in flight as the outbox sends)
 * against the same publisher without the condition, on the same spawned
 * nats-server (single server, file storage), rounds interleaved.
 * `npm run bench -- audit-fence`.
 */
import { create } from "@bufbuild/protobuf";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { EvictionReason, EvictionStartedSchema, type Event } from "@warden/proto";
import { createUlidFactory, cryptoRng, systemClock } from "@warden/common";
import { createEventFactory } from "@warden/events";
import { connectAudit, createNatsPublisher, defaultAuditStreamName, ensureAuditStream } from "@warden/audit";
import { startNatsServer } from "../support/nats-server.js";
import { median, type BenchResult } from "./bench-result.js";

const eventsPerRound = 20_000;
const inFlight = 512;
const rounds = 3;

function events(n: number): Event[] {
  const factory = createEventFactory({ clock: systemClock, newId: createUlidFactory(systemClock, cryptoRng), epoch: 1n, leaderEpoch: 7n });
  return Array.from({ length: n }, (_, i) =>
    factory.create({ nodeId: `gpu-node-${String(i % 8)}`, model: `model-${String(i % 32)}`, address: "10.0.0.7:40123", incarnation: `INC${String(i % 512)}`, payload: { case: "evictionStarted", value: create(EvictionStartedSchema, { reason: EvictionReason.LRU, trigger: "load of llama-70b" }) } }),
  );
}

/** Events/s publishing `n` events with `inFlight` outstanding, as the outbox's window does. */
async function publishRun(nc: NatsConnection, fenced: boolean): Promise<number> {
  const jsm = await jetstreamManager(nc);
  await jsm.streams.purge(defaultAuditStreamName);
  const p = createNatsPublisher(nc, fenced ? { fence: { writerEpoch: () => 7n } } : {});
  const list = events(eventsPerRound);
  const never = new AbortController().signal;
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      for (;;) {
        const e = list[next++];
        if (e === undefined) return;
        await p.publish(e, never);
      }
    }),
  );
  const rate = eventsPerRound / ((performance.now() - t0) / 1000);
  p.close();
  const info = await jsm.streams.info(defaultAuditStreamName);
  if (info.state.messages !== eventsPerRound) throw new Error(`bench: ${String(info.state.messages)} stored, expected ${String(eventsPerRound)}`);
  return rate;
}

export async function run(): Promise<BenchResult[]> {
  const server = await startNatsServer();
  const nc = await connectAudit({ servers: server.url });
  try {
    await ensureAuditStream(nc);
    const plain: number[] = [];
    const fenced: number[] = [];
    await publishRun(nc, false); // warm-up
    for (let i = 0; i < rounds; i++) {
      plain.push(await publishRun(nc, false));
      fenced.push(await publishRun(nc, true));
    }
    return [
      {
        name: `events/s: JetStream publisher with the HA fence (conditional on the last message), ${String(eventsPerRound)} events, ${String(inFlight)} in flight, median of ${String(rounds)}`,
        baseline: "the same publisher, unconditional (single coordinator)",
        ours: median(fenced),
        baselineValue: median(plain),
        unit: "events/s",
        higherIsBetter: true,
      },
    ];
  } finally {
    await nc.close();
    await server.dispose();
  }
}
