import { afterEach, beforeEach, describe, expect, it } from "vitest";
import fc from "fast-check";
import { appendFile, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { EvictionReason, EvictionStartedSchema, EvictionStoppedSchema } from "@warden/proto";
import { Code, ManualClock, createUlidFactory, isWardenError, seededRng } from "@warden/common";
import { createEventFactory, type EventInit } from "@warden/events";
import { reduceJournal, type JournalRecord } from "@warden/outbox";
import { openFileJournal } from "./file-journal.js";
import { encodeJournalRecord } from "./record-codec.js";

const clock = new ManualClock(0, 1_750_000_000_000);
const events = createEventFactory({ clock, newId: createUlidFactory(clock, seededRng(1)), epoch: 42n });
const started = (incarnation: string): EventInit => ({
  nodeId: "n.1",
  model: "m_1",
  incarnation,
  address: "127.0.0.1:9",
  payload: { case: "evictionStarted", value: create(EvictionStartedSchema, { reason: EvictionReason.BUSY, openRequestIds: ["r1", "r2"] }) },
});
const stopped = (incarnation: string): EventInit => ({ incarnation, payload: { case: "evictionStopped", value: create(EvictionStoppedSchema, {}) } });
const intent = (incarnation: string): JournalRecord => ({
  kind: "stop-intent",
  incarnation,
  nodeId: "n",
  model: "m",
  address: "a:1",
  reason: "drain",
  recordedAtMs: 1_750_000_000_123,
});

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-journal-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("file journal", () => {
  it("replays every kind of record in order after reopening", async () => {
    const path = join(dir, "sub", "journal.wj");
    const j = await openFileJournal({ path });
    expect(await j.replay()).toEqual([]);
    const e = events.create(started("A"));
    const records: JournalRecord[] = [
      { kind: "epoch", epoch: 42n },
      { kind: "event", event: e },
      intent("A"),
      { kind: "published", eventIds: [e.id] },
      { kind: "stop-intent-cleared", incarnation: "A" },
    ];
    for (const r of records) await j.append(r);
    await j.close();
    await expect(j.append(records[0]!)).rejects.toThrow(/closed/);
    const again = await openFileJournal({ path });
    expect(await again.replay()).toEqual(records);
    await expect(again.replay()).rejects.toThrow(/once/);
    await again.close();
  });

  it("truncates a torn last record and keeps appending after it", async () => {
    const path = join(dir, "j");
    const j = await openFileJournal({ path });
    for (const inc of ["A", "B", "C"]) await j.append({ kind: "event", event: events.create(started(inc)) });
    await j.close();
    const goodSize = (await stat(path)).size;
    const torn = encodeJournalRecord({ kind: "event", event: events.create(started("D")) }).subarray(0, 20);
    await appendFile(path, torn);

    const j2 = await openFileJournal({ path });
    expect((await j2.replay()).map((r) => (r.kind === "event" ? r.event.incarnation : r.kind))).toEqual(["A", "B", "C"]);
    expect(j2.stats().truncatedTailBytes).toBe(20);
    expect(j2.repaired).toEqual({ path, offsetBytes: goodSize, droppedBytes: 20, droppedRecords: 1 });
    expect((await stat(path)).size).toBe(goodSize);
    await j2.append(intent("E"));
    await j2.close();
    const j3 = await openFileJournal({ path });
    expect(await j3.replay()).toHaveLength(4);
    expect(j3.repaired).toBeUndefined();
    await j3.close();
  });

  it("describes what a repair dropped: a cut or CRC-failing last complete record counts one, zero fill none", async () => {
    const path = join(dir, "j");
    const j = await openFileJournal({ path });
    for (const inc of ["A", "B"]) await j.append(intent(inc));
    await j.append({ kind: "event", event: events.create(stopped("B")) });
    await j.close();
    const image = await readFile(path);
    const last = encodeJournalRecord({ kind: "event", event: events.create(stopped("B")) }).length;
    const lastAt = image.length - last;

    // Cut inside the last (acknowledged) record.
    await writeFile(path, image.subarray(0, image.length - 3));
    let again = await openFileJournal({ path });
    expect(again.repaired).toEqual({ path, offsetBytes: lastAt, droppedBytes: last - 3, droppedRecords: 1 });
    expect(await again.replay()).toHaveLength(2);
    await again.close();

    // The last record whole but one body byte flipped, then zero fill after it.
    const flipped = Buffer.from(image);
    flipped[lastAt + 12] = (flipped[lastAt + 12] ?? 0) ^ 0x01;
    await writeFile(path, Buffer.concat([flipped, Buffer.alloc(512)]));
    again = await openFileJournal({ path });
    expect(again.repaired).toEqual({ path, offsetBytes: lastAt, droppedBytes: last + 512, droppedRecords: 1 });
    await again.close();

    // The last record's header zeroed, its body intact (sectors of the append landing out of order).
    const zeroedHeader = Buffer.from(image);
    zeroedHeader.fill(0, lastAt, lastAt + 9);
    await writeFile(path, zeroedHeader);
    again = await openFileJournal({ path });
    expect(again.repaired).toEqual({ path, offsetBytes: lastAt, droppedBytes: last, droppedRecords: 1 });
    await again.close();

    // Only zero fill after the last good record: bytes dropped, no record.
    await writeFile(path, Buffer.concat([image, Buffer.alloc(4096)]));
    again = await openFileJournal({ path });
    expect(again.repaired).toEqual({ path, offsetBytes: image.length, droppedBytes: 4096, droppedRecords: 0 });
    expect(await again.replay()).toHaveLength(3);
    await again.close();
  });

  it("after a cut at any byte (optionally followed by zeros), replays exactly the records written before the cut", async () => {
    const path = join(dir, "cut");
    const j = await openFileJournal({ path });
    const records: JournalRecord[] = [];
    for (let i = 0; i < 12; i++) {
      const r: JournalRecord = i % 3 === 0 ? intent(`I${i}`) : { kind: "event", event: events.create(started(`E${i}`)) };
      records.push(r);
      await j.append(r);
    }
    await j.close();
    const image = await readFile(path);
    const ends: number[] = [];
    let at = 8;
    for (const r of records) {
      at += encodeJournalRecord(r).length;
      ends.push(at);
    }
    expect(at).toBe(image.length);
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 8, max: image.length }), fc.integer({ min: 0, max: 300 }), async (cut, zeros) => {
        await writeFile(path, Buffer.concat([image.subarray(0, cut), Buffer.alloc(zeros)]));
        const again = await openFileJournal({ path });
        const want = records.slice(0, ends.filter((e) => e <= cut).length);
        expect(await again.replay()).toEqual(want);
        await again.close();
        const keptEnd = want.length === 0 ? 8 : (ends[want.length - 1] ?? 0);
        expect((await stat(path)).size).toBe(keptEnd);
        expect(again.repaired?.droppedBytes ?? 0).toBe(cut + zeros - keptEnd);
      }),
      { numRuns: 300 },
    );
  });

  it("treats a checksum-failing last record or a zero-filled tail as torn", async () => {
    const path = join(dir, "j");
    const j = await openFileJournal({ path });
    await j.append(intent("A"));
    await j.close();
    const bad = encodeJournalRecord(intent("B"));
    bad[bad.length - 1] = (bad[bad.length - 1] ?? 0) ^ 0xff;
    await appendFile(path, Buffer.concat([bad]));
    const j2 = await openFileJournal({ path });
    expect(await j2.replay()).toHaveLength(1);
    await j2.close();
    await appendFile(path, Buffer.alloc(4096));
    const j3 = await openFileJournal({ path });
    expect(await j3.replay()).toHaveLength(1);
    expect(j3.stats().truncatedTailBytes).toBe(4096);
    await j3.close();
  });

  it("refuses to open over corruption in the middle (DATA_LOSS) instead of dropping durable records", async () => {
    const path = join(dir, "j");
    const j = await openFileJournal({ path });
    await j.append(intent("A"));
    await j.append(intent("B"));
    await j.close();
    const image = await readFile(path);
    image[8 + 12] = (image[8 + 12] ?? 0) ^ 0xff; // inside the first record's body
    await writeFile(path, image);
    try {
      await openFileJournal({ path });
      expect.unreachable();
    } catch (err) {
      expect(isWardenError(err, Code.DataLoss)).toBe(true);
      // The operator is told which file, where, and that a later record is intact.
      expect(String(err)).toContain(path);
      expect(String(err)).toMatch(/offset 8 \(checksum mismatch\) followed by a valid record at offset \d+/);
    }
    // The file is left as it was for inspection.
    expect(await readFile(path)).toEqual(image);
  });

  it("lets concurrent appends share one fsync (group commit)", async () => {
    const j = await openFileJournal({ path: join(dir, "j") });
    await Promise.all(Array.from({ length: 200 }, (_, i) => j.append({ kind: "event", event: events.create(started(`I${i}`)) })));
    const s = j.stats();
    expect(s.appends).toBe(200);
    expect(s.fsyncs).toBeLessThanOrEqual(3); // the first batch may go alone, then everyone waiting shares one
    await j.close();
  });

  it("compacts to unpublished events, unfinished instances and open intents, and survives a reopen", async () => {
    const path = join(dir, "j");
    const j = await openFileJournal({ path, compactAtBytes: 16 * 1024 });
    const all: JournalRecord[] = [{ kind: "epoch", epoch: 42n }];
    const write = async (r: JournalRecord) => {
      all.push(r);
      await j.append(r);
    };
    await write(all[0]!);
    await write(intent("KEEP"));
    await write(intent("GONE"));
    await write({ kind: "stop-intent-cleared", incarnation: "GONE" });
    const unfinished = events.create(started("U"));
    await write({ kind: "event", event: unfinished });
    await write({ kind: "published", eventIds: [unfinished.id] });
    for (let i = 0; i < 400; i++) {
      const a = events.create(started(`X${i}`));
      const b = events.create(stopped(`X${i}`));
      await write({ kind: "event", event: a });
      await write({ kind: "event", event: b });
      await write({ kind: "published", eventIds: [a.id, b.id] });
    }
    const pendingEvent = events.create(started("P"));
    await write({ kind: "event", event: pendingEvent });
    expect(j.stats().compactions).toBeGreaterThanOrEqual(1);
    expect(j.stats().sizeBytes).toBeLessThan(16 * 1024);
    await j.close();

    const j2 = await openFileJournal({ path, compactAtBytes: 16 * 1024 });
    const replayed = await j2.replay();
    const want = reduceJournal(all);
    const got = reduceJournal(replayed);
    expect([...got.unpublished.keys()]).toEqual([...want.unpublished.keys()]);
    expect([...got.openStopIntents.keys()]).toEqual(["KEEP"]);
    expect(got.maxEpoch).toBe(42n);
    expect(got.lastEventByIncarnation.get("U")?.id).toBe(unfinished.id);
    expect(got.unpublished.has(pendingEvent.id)).toBe(true);
    expect(replayed.length).toBeLessThan(all.length / 4); // history since the last compaction stays until the next
    await j2.close();
  });

  it("ignores a temp file left by a compaction that crashed before its rename", async () => {
    const path = join(dir, "j");
    const j = await openFileJournal({ path });
    await j.append(intent("A"));
    await j.close();
    await writeFile(`${path}.compact.tmp`, "half-written");
    const j2 = await openFileJournal({ path });
    expect(await j2.replay()).toHaveLength(1);
    await expect(stat(`${path}.compact.tmp`)).rejects.toThrow();
    await j2.close();
  });
});
