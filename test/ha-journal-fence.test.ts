import { describe, expect, it } from "vitest";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { headers, type NatsConnection } from "@nats-io/transport-node";
import { Code, isStaleLeaderEpoch, isWardenError } from "@warden/common";
import { encodeJournalRecord } from "@warden/journal";
import type { JournalRecord } from "@warden/outbox";
import { openJetStreamJournal } from "../services/coordinator/src/ha/jetstream-journal.js";
import { scratchJetStream } from "./support/scratch-jetstream.js";

// The leader-epoch fence of the JetStream journal on a real 3-server cluster:
// two writers with lease epochs e1 < e2 interleave as a paused-then-resumed
// ex-leader and its successor do.

const intent = (incarnation: string): JournalRecord => ({ kind: "stop-intent", incarnation, nodeId: "n.1", model: "m_1", address: "a:1", reason: "lru", recordedAtMs: 1_750_000_000_000 });
const incarnations = (rs: readonly JournalRecord[]): string[] => rs.map((r) => (r.kind === "stop-intent" ? r.incarnation : r.kind));

const js = scratchJetStream({ stream: "JF", subject: "warden.journal.f" });
const connect = (): Promise<NatsConnection> => js.connect();
const streamName = (): { stream: string; subject: string } => js.streamName();

async function messagesIn(nc: NatsConnection, stream: string): Promise<number> {
  return (await (await jetstreamManager(nc)).streams.info(stream)).state.messages;
}


describe("JetStream journal: appends fenced by the writer's lease epoch", () => {
  it("an ex-leader (epoch e1) resuming after the new leader's (e2) marker: its appends fail for good, typed, it is told; nothing of it is stored", async () => {
    const names = streamName();
    const nc = await connect();
    const superseded: bigint[] = [];
    const w1 = await openJetStreamJournal(nc, { ...names, writerEpoch: () => 1n, onSuperseded: (e) => superseded.push(e) });
    await w1.replay();
    await w1.append({ kind: "epoch", epoch: 100n });
    await w1.append(intent("A"));

    // w1 "pauses" here; e2 takes over on its own connection, replays, writes its marker.
    const w2 = await openJetStreamJournal(await connect(), { ...names, writerEpoch: () => 2n });
    expect(incarnations(await w2.replay())).toEqual(["epoch", "A"]);
    await w2.append({ kind: "epoch", epoch: 200n });
    const stored = await messagesIn(nc, names.stream);

    // w1 resumes: its chain no longer ends the stream; the retry path must not re-chain on top of e2.
    const err = await w1.append(intent("STALE")).then(() => undefined, (e: unknown) => e);
    expect(isStaleLeaderEpoch(err)).toBe(true);
    expect(isWardenError(err, Code.FailedPrecondition)).toBe(true);
    expect(superseded).toEqual([2n]);
    // Terminal: a later append fails at once, with the same error, and is never sent.
    expect(isStaleLeaderEpoch(await w1.append(intent("STALE2")).then(() => undefined, (e: unknown) => e))).toBe(true);
    expect(await messagesIn(nc, names.stream)).toBe(stored);

    // The new leader goes on appending behind its own marker.
    await w2.append(intent("B"));
    expect(incarnations(await (await openJetStreamJournal(await connect(), names)).replay())).toEqual(["epoch", "A", "epoch", "B"]);
  });

  it("pipelined appends of a resumed ex-leader: none stored, every one refused", async () => {
    const names = streamName();
    const nc = await connect();
    const w1 = await openJetStreamJournal(nc, { ...names, writerEpoch: () => 5n });
    await w1.replay();
    await w1.append(intent("A"));
    const w2 = await openJetStreamJournal(await connect(), { ...names, writerEpoch: () => 6n });
    await w2.replay();
    await w2.append({ kind: "epoch", epoch: 1n });
    const outcomes = await Promise.allSettled(Array.from({ length: 16 }, (_, i) => w1.append(intent(`S${String(i)}`))));
    expect(outcomes.every((o) => o.status === "rejected" && isStaleLeaderEpoch(o.reason))).toBe(true);
    expect(incarnations(await (await openJetStreamJournal(await connect(), names)).replay())).toEqual(["A", "epoch"]);
  });

  it("a new leader's first append lands right behind what it replayed: a record slipped in between makes it fail (ABORTED), nothing of it stored", async () => {
    const names = streamName();
    const nc = await connect();
    const w1 = await openJetStreamJournal(nc, { ...names, writerEpoch: () => 1n });
    await w1.replay();
    await w1.append(intent("A"));
    const w2 = await openJetStreamJournal(await connect(), { ...names, writerEpoch: () => 2n });
    await w2.replay();
    // w1 still believes it leads and appends between w2's replay and w2's first append.
    await w1.append(intent("SLIPPED"));
    const err = await w2.append({ kind: "epoch", epoch: 2n }).then(() => undefined, (e: unknown) => e);
    expect(isWardenError(err, Code.Aborted)).toBe(true);
    expect(incarnations(await (await openJetStreamJournal(await connect(), names)).replay())).toEqual(["A", "SLIPPED"]);
  });

  it("nothing is sent while the lease is not held: the append fails UNAVAILABLE at its deadline, nothing stored", async () => {
    const names = streamName();
    const nc = await connect();
    let held: bigint | undefined = 3n;
    const w = await openJetStreamJournal(nc, { ...names, writerEpoch: () => held, appendTimeoutMs: 500, ackTimeoutMs: 250 });
    await w.replay();
    await w.append(intent("A"));
    held = undefined;
    const err = await w.append(intent("NOT-HELD")).then(() => undefined, (e: unknown) => e);
    expect(isWardenError(err, Code.Unavailable)).toBe(true);
    held = 3n;
    await w.append(intent("B"));
    expect(incarnations(await (await openJetStreamJournal(await connect(), names)).replay())).toEqual(["A", "B"]);
  });

  it("replay ignores records of an epoch written after a record of a newer epoch, and a replaying writer older than the log's newest is superseded", async () => {
    const names = streamName();
    const nc = await connect();
    const w2 = await openJetStreamJournal(nc, { ...names, writerEpoch: () => 2n });
    await w2.replay();
    await w2.append(intent("A"));
    // A stale write past the chain (what an unfenced ex-leader could once store): epoch 1 after epoch 2.
    const h = headers();
    h.set("Warden-Epoch", "1");
    await jetstream(nc).publish(names.subject, encodeJournalRecord(intent("STALE")), { headers: h });
    await w2.append(intent("B")).catch(() => undefined);
    const reader = await openJetStreamJournal(await connect(), names);
    expect(incarnations(await reader.replay())).not.toContain("STALE");
    expect(reader.stats().staleIgnored).toBe(1);
    // A writer of epoch 1 replaying this log learns it is superseded before it acts.
    const superseded: bigint[] = [];
    const old = await openJetStreamJournal(await connect(), { ...names, writerEpoch: () => 1n, onSuperseded: (e) => superseded.push(e) });
    expect(isStaleLeaderEpoch(await old.replay().then(() => undefined, (e: unknown) => e))).toBe(true);
    expect(superseded).toEqual([2n]);
  });
});
