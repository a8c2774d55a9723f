import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { Code, ManualClock, createUlidFactory, isWardenError, seededRng } from "@warden/common";
import { createEventFactory, type EventInit } from "@warden/events";
import { openFileJournal } from "@warden/journal";
import { liveJournalRecords, reduceJournal, type JournalRecord } from "@warden/outbox";
import { EvictionReason, EvictionStartedSchema, EvictionStoppedSchema } from "@warden/proto";
import { openJetStreamJournal, type JetStreamJournal } from "../services/coordinator/src/ha/jetstream-journal.js";
import { scratchJetStream } from "./support/scratch-jetstream.js";

const clock = new ManualClock(0, 1_750_000_000_000);
const events = createEventFactory({ clock, newId: createUlidFactory(clock, seededRng(7)), epoch: 9n });
const started = (incarnation: string): EventInit => ({
  nodeId: "n.1",
  model: "m_1",
  incarnation,
  address: "127.0.0.1:9",
  payload: { case: "evictionStarted", value: create(EvictionStartedSchema, { reason: EvictionReason.BUSY, openRequestIds: ["r1"] }) },
});
const stopped = (incarnation: string): EventInit => ({ incarnation, payload: { case: "evictionStopped", value: create(EvictionStoppedSchema, {}) } });
const intent = (incarnation: string): JournalRecord => ({ kind: "stop-intent", incarnation, nodeId: "n.1", model: "m_1", address: "a:1", reason: "drain", recordedAtMs: 1_750_000_000_123 });

const js = scratchJetStream({ stream: "J", subject: "warden.journal.t" });
const connect = (): Promise<NatsConnection> => js.connect();
/** A fresh stream per test, so tests do not see each other's records. */
const streamName = (): { stream: string; subject: string } => js.streamName();

async function until(cond: () => Promise<boolean> | boolean, what: string, timeoutMs = 60_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`not within ${String(timeoutMs)} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}


function everyKind(): JournalRecord[] {
  const a = events.create(started("A"));
  const b = events.create(started("B"));
  return [
    { kind: "epoch", epoch: 9n },
    { kind: "event", event: a },
    intent("A"),
    { kind: "event", event: b },
    { kind: "published", eventIds: [a.id] },
    { kind: "stop-intent-cleared", incarnation: "A" },
    { kind: "event", event: events.create(stopped("A")) },
    intent("B"),
  ];
}

describe("JetStream journal on a 3-server cluster (R3)", () => {
  it("replays every record kind as the file journal does, from a second connection, in issue order under pipelining", async () => {
    const names = streamName();
    const records = everyKind();
    const nc1 = await connect();
    const j = await openJetStreamJournal(nc1, names);
    expect(await j.replay()).toEqual([]);
    await expect(j.replay()).rejects.toThrow(/once/);
    for (const r of records) await j.append(r);
    // 64 appends in flight at once (group commit): acked, and stored in the order issued.
    const burst = Array.from({ length: 64 }, (_, i) => intent(`P${String(i)}`));
    await Promise.all(burst.map((r) => j.append(r)));

    const dir = await mkdtemp(join(tmpdir(), "warden-ha-journal-"));
    try {
      const fj = await openFileJournal({ path: join(dir, "j") });
      await fj.replay();
      for (const r of [...records, ...burst]) await fj.append(r);
      await fj.close();
      const fj2 = await openFileJournal({ path: join(dir, "j") });
      const fileReplay = await fj2.replay();
      await fj2.close();

      // A coordinator on another host: its own connection, a new journal handle.
      const nc2 = await connect();
      const j2 = await openJetStreamJournal(nc2, names);
      const replayed = await j2.replay();
      expect(replayed).toEqual(fileReplay);
      expect(reduceJournal(replayed)).toEqual(reduceJournal(fileReplay));
      // The second handle appends after the first one's records (the msg-id chain anchors on the stream's last).
      await j2.append({ kind: "stop-intent-cleared", incarnation: "B" });
      const j3 = await openJetStreamJournal(await connect(), names);
      expect((await j3.replay()).at(-1)).toEqual({ kind: "stop-intent-cleared", incarnation: "B" });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("refuses a record over maxRecordBytes with INVALID_ARGUMENT and stores nothing", async () => {
    const names = streamName();
    const nc = await connect();
    const j = await openJetStreamJournal(nc, { ...names, maxRecordBytes: 1024 });
    await j.replay();
    const big: JournalRecord = { kind: "published", eventIds: [Array.from({ length: 1100 }, () => "x").join("")] };
    await expect(j.append(big)).rejects.toSatisfy((e: unknown) => isWardenError(e, Code.InvalidArgument) && /record/.test(String(e)));
    await j.append({ kind: "epoch", epoch: 1n });
    expect(await (await openJetStreamJournal(nc, { ...names, maxRecordBytes: 1024 })).replay()).toEqual([{ kind: "epoch", epoch: 1n }]);
    await expect(openJetStreamJournal(nc, { ...names, maxRecordBytes: 10 })).rejects.toSatisfy((e: unknown) => isWardenError(e, Code.InvalidArgument));
  });

  it("compaction keeps exactly liveJournalRecords' records, appends after it survive the purge", async () => {
    const names = streamName();
    const nc = await connect();
    const j = await openJetStreamJournal(nc, { ...names, compactAtRecords: 16 });
    await j.replay();
    const first: JournalRecord[] = [{ kind: "epoch", epoch: 7n }];
    for (let i = 0; i < 4; i++) {
      const s = events.create(started(`F${String(i)}`));
      const t = events.create(stopped(`F${String(i)}`));
      first.push({ kind: "event", event: s }, { kind: "event", event: t }, { kind: "published", eventIds: [s.id, t.id] });
    }
    first.push(intent("X"), { kind: "event", event: events.create(started("Y")) }, intent("Z"));
    first.push({ kind: "stop-intent-cleared", incarnation: "Z" });
    expect(first).toHaveLength(17);
    for (const r of first.slice(0, 16)) await j.append(r);
    // The 16th ack started the compaction: its copies were queued before this append.
    const after = first.slice(16);
    for (const r of after) await j.append(r);
    await until(() => j.stats().compactions === 1, "one compaction");
    const live = liveJournalRecords(first.slice(0, 16));
    const replayed = await (await openJetStreamJournal(await connect(), names)).replay();
    expect(replayed).toEqual([...live, ...after]);
    // The same state minus finished history (liveJournalRecords' contract).
    const want = reduceJournal(first);
    const got = reduceJournal(replayed);
    expect([got.unpublished, got.openStopIntents, got.maxEpoch]).toEqual([want.unpublished, want.openStopIntents, want.maxEpoch]);
    expect([...got.lastEventByIncarnation.keys()]).toEqual(["Y"]);
    const jsm = await jetstreamManager(nc);
    expect((await jsm.streams.info(names.stream)).state.messages).toBe(live.length + after.length);
  });

  it("acks with one server down, fails UNAVAILABLE in its deadline with two down (nothing half-applied), acks again after one restarts", async () => {
    const names = streamName();
    const nc = await connect();
    const appendTimeoutMs = 4_000;
    const j: JetStreamJournal = await openJetStreamJournal(nc, { ...names, appendTimeoutMs, ackTimeoutMs: 1_000 });
    await j.replay();
    const acked: JournalRecord[] = [];
    const add = async (r: JournalRecord, journal = j): Promise<void> => {
      await journal.append(r);
      acked.push(r);
    };
    await add(intent("K0"));

    // Kill the stream's leader: the hardest one to lose (a new leader must be elected).
    const jsm = await jetstreamManager(nc);
    const leader = (await jsm.streams.info(names.stream)).cluster?.leader;
    const first = Math.max(0, js.cluster.servers.findIndex((s) => s.name === leader));
    // 32 appends in flight while the leader dies: each acks (after the election, by retries
    // under the same msg ids), none is stored twice, and the stream keeps their issue order.
    const wide = await openJetStreamJournal(nc, { ...names, appendTimeoutMs: 60_000 });
    const burst = Array.from({ length: 32 }, (_, i) => intent(`K1-${String(i)}`));
    const killed = js.cluster.kill(first);
    await Promise.all(burst.map((r) => wide.append(r)));
    acked.push(...burst);
    await killed;
    await add(intent("K2"), wide);
    // One writer at a time: `j` follows K0, which another handle's records now follow, so
    // the epoch fence would refuse it for good (ABORTED); a handle opened now follows K2.
    const late = await openJetStreamJournal(nc, { ...names, appendTimeoutMs, ackTimeoutMs: 1_000 });

    const second = [0, 1, 2].find((i) => i !== first)!;
    await js.cluster.kill(second);
    // Without quorum the publish is not acked and recovery cannot get it stored either.
    const t1 = Date.now();
    const err = await late.append(intent("LOST")).then(
      () => undefined,
      (e: unknown) => e,
    );
    const elapsedMs = Date.now() - t1;
    expect(isWardenError(err, Code.Unavailable)).toBe(true);
    expect(String(err)).toContain(names.stream);
    // Its own deadline plus scheduling slack on a loaded machine: never a hang.
    expect(elapsedMs).toBeLessThan(appendTimeoutMs + 10_000);

    await js.cluster.restart(second);
    const back = await openJetStreamJournal(nc, { ...names, appendTimeoutMs: 60_000 });
    await add(intent("K3"), back);

    // Replay on a new connection: whole records only, the acked ones in order; a failed
    // append whose outcome was unknown may be present (whole, once, in its place) or not.
    const replayed = await (await openJetStreamJournal(await connect(), names)).replay();
    const failedKinds = new Set(["LOST"]);
    const failedSeen = replayed.filter((r) => r.kind === "stop-intent" && failedKinds.has(r.incarnation));
    expect(replayed.filter((r) => !(r.kind === "stop-intent" && failedKinds.has(r.incarnation)))).toEqual(acked);
    for (const f of failedSeen) expect(f).toEqual(intent(f.kind === "stop-intent" ? f.incarnation : ""));
    expect(new Set(failedSeen.map((r) => (r.kind === "stop-intent" ? r.incarnation : ""))).size).toBe(failedSeen.length);
    await js.cluster.restart(first);
  });
});
