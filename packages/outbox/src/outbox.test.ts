import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { ManualClock, createUlidFactory, seededRng } from "@warden/common";
import { createEventFactory } from "@warden/events";
import type { JournalRecord } from "./journal-record.js";
import { liveJournalRecords, reduceJournal } from "./reduce-journal.js";
import { MemoryJournal, settle, setup, started, stopped } from "./outbox-fixture.js";

describe("outbox", () => {
  it("journals every event before it is published and marks it published after the ack", async () => {
    const { outbox, publisher, journal, clock } = setup();
    await outbox.start();
    for (let i = 0; i < 20; i++) expect(await outbox.emit(started(`i${i}`))).toMatchObject({ outcome: "queued" });
    await settle(clock, 5);
    expect(publisher.journaledBeforePublish.every(Boolean)).toBe(true);
    expect(publisher.stored.size).toBe(20);
    expect(outbox.stats()).toMatchObject({ depth: 0, published: 20, dropped: 0 });
    expect(reduceJournal(journal.records).unpublished.size).toBe(0);
  });

  it("keeps many publishes in flight", async () => {
    const { outbox, publisher, clock } = setup(undefined, { maxInFlight: 64 });
    await outbox.start();
    publisher.mode = "hold";
    await Promise.all(Array.from({ length: 200 }, (_, i) => outbox.emit(started(`i${i}`))));
    expect(outbox.stats().inFlight).toBe(64);
    for (let i = 0; i < 10; i++) {
      publisher.release();
      await settle(clock, 2);
    }
    expect(publisher.maxConcurrent).toBe(64);
    expect(outbox.stats()).toMatchObject({ depth: 0, published: 200 });
  });

  it("loses no event through publisher failures (retries with back-off until acked)", async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 60 }), fc.double({ min: 0, max: 0.9, noNaN: true }), fc.integer(), async (n, failRate, seed) => {
        const journal = new MemoryJournal();
        const { outbox, publisher, clock } = setup(journal, { maxInFlight: 8 }, undefined, seed);
        publisher.mode = "random";
        publisher.failRate = failRate;
        await outbox.start();
        const ids: string[] = [];
        for (let i = 0; i < n; i++) ids.push((await outbox.emit(started(`i${i % 7}`))).event.id);
        // At a 90 % failure rate each success takes ~10 probes: allow far more rounds than needed.
        for (let round = 0; round < 5_000 && outbox.stats().depth > 0; round++) await settle(clock, 1, 20_000);
        expect(outbox.stats().depth).toBe(0);
        for (const id of ids) expect(publisher.stored.get(id)).toBeGreaterThanOrEqual(1);
        if (publisher.attempts.length > n) expect(outbox.stats().retries).toBeGreaterThan(0);
      }),
      { numRuns: 40 },
    );
  });

  it("probes with one publish at a time while the stream fails, then opens the window again", async () => {
    const { outbox, publisher, clock } = setup(undefined, { maxInFlight: 16 });
    await outbox.start();
    publisher.mode = "fail";
    for (let i = 0; i < 50; i++) await outbox.emit(started(`i${i}`));
    await settle(clock, 20, 200);
    const during = publisher.attempts.length;
    expect(outbox.stats().retries).toBeGreaterThan(0);
    expect(outbox.stats().depth).toBe(50);
    expect(outbox.health().status).toBe("serving"); // an outage alone is not unhealthy: the outbox is the buffer
    publisher.mode = "ok";
    await settle(clock, 30, 10_000);
    expect(outbox.stats()).toMatchObject({ depth: 0, published: 50 });
    expect(during).toBeLessThan(50 * 20); // not flooding a dead server
  });

  it("a publisher's ready signal ends the back-off wait at once; without it the wait runs its course", async () => {
    const { outbox, publisher, clock } = setup(undefined, { maxInFlight: 16, retryBackoff: { initialMs: 60_000, factor: 2, maxMs: 60_000, jitter: 0 } });
    const listeners: (() => void)[] = [];
    publisher.onReady = (l: () => void) => {
      listeners.push(l);
      return () => listeners.splice(listeners.indexOf(l), 1);
    };
    await outbox.start();
    publisher.mode = "fail";
    for (let i = 0; i < 20; i++) await outbox.emit(started(`i${i}`));
    await settle(clock, 3, 1);
    const failed = publisher.attempts.length;
    publisher.mode = "ok";
    // The back-off step is a minute: a few ms of clock later nothing has been retried.
    await settle(clock, 5, 1);
    expect(publisher.attempts.length).toBe(failed);
    expect(outbox.stats().depth).toBe(20);
    // The transport says it is back: the probe goes at once, its ack reopens the window.
    expect(listeners).toHaveLength(1);
    for (const l of listeners) l();
    await settle(clock, 5, 1);
    expect(outbox.stats()).toMatchObject({ depth: 0, published: 20 });
    await outbox.close();
    expect(listeners).toHaveLength(0);
  });

  it("when full, drops and counts instead of blocking, reports not-serving, and recovers after draining", async () => {
    const { outbox, publisher, clock, healths } = setup(undefined, { capacity: 10 });
    await outbox.start();
    publisher.mode = "hold";
    const outcomes = [];
    for (let i = 0; i < 13; i++) outcomes.push((await outbox.emit(started(`i${i}`))).outcome);
    expect(outcomes.filter((o) => o === "dropped")).toHaveLength(3);
    expect(outbox.stats()).toMatchObject({ depth: 10, dropped: 3 });
    expect(outbox.health()).toMatchObject({ status: "not-serving" });
    expect(healths.filter((h) => h.status === "not-serving").length).toBeGreaterThanOrEqual(3); // reported on each drop
    publisher.mode = "ok";
    publisher.release();
    await settle(clock, 5);
    expect(outbox.health()).toEqual({ status: "serving" });
    expect(healths.at(-1)).toEqual({ status: "serving" });
    expect(outbox.stats().dropped).toBe(3);
  });

  it("loses no event the journal refuses: deferred, health says so, journaled and published in emit order once it takes writes", async () => {
    const { outbox, journal, publisher, clock } = setup();
    await outbox.start();
    journal.failAppends = true;
    const a = await outbox.emit(started("a"));
    expect(a.outcome).toBe("deferred");
    expect(outbox.health()).toMatchObject({ status: "not-serving", reason: expect.stringContaining("disk full") as string });
    await settle(clock, 5); // retried with back-off, still refused
    journal.failAppends = false;
    // Newer events wait behind the refused one, even though the journal would take them now.
    const b = await outbox.emit(stopped("a"));
    expect(b.outcome).toBe("deferred");
    expect(outbox.stats().depth).toBe(2);
    await settle(clock, 5);
    expect(journal.eventIds()).toEqual([a.event.id, b.event.id]);
    expect(publisher.stored.size).toBe(2);
    expect(outbox.health()).toEqual({ status: "serving" });
    expect((await outbox.emit(started("c"))).outcome).toBe("queued");
  });

  it("property: through any pattern of journal refusals, every event is journaled once, in emit order, and published", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.oneof(fc.constant("emit" as const), fc.constant("fail" as const), fc.constant("heal" as const), fc.constant("wait" as const)), { minLength: 1, maxLength: 40 }), fc.integer(), async (ops, seed) => {
        const { outbox, journal, publisher, clock } = setup(undefined, { maxInFlight: 4 }, undefined, seed);
        await outbox.start();
        const ids: string[] = [];
        for (const [i, op] of ops.entries()) {
          if (op === "fail") journal.failAppends = true;
          else if (op === "heal") journal.failAppends = false;
          else if (op === "wait") await settle(clock, 3);
          else ids.push((await outbox.emit(i % 2 === 0 ? started(`i${String(i)}`) : stopped(`i${String(i - 1)}`))).event.id);
        }
        journal.failAppends = false;
        await settle(clock, 20);
        expect(journal.eventIds()).toEqual(ids);
        expect(publisher.stored.size).toBe(ids.length);
        expect(outbox.stats().depth).toBe(0);
        expect(outbox.health()).toEqual({ status: "serving" });
      }),
      { numRuns: 200 },
    );
  });

  it("a closed outbox still refuses, and an aborted append is not deferred", async () => {
    const { outbox, journal } = setup();
    await outbox.start();
    journal.failAppends = true;
    const ac = new AbortController();
    ac.abort(new Error("caller gave up"));
    await expect(outbox.emit(started("a"), ac.signal)).rejects.toThrow(/caller gave up/);
    expect(outbox.stats().depth).toBe(0);
    await outbox.close();
    await expect(outbox.emit(started("b"))).rejects.toThrow(/state running/);
  });

  it("after a crash, re-queues unpublished events with their ids and emits recovered for unfinished instances", async () => {
    const journal = new MemoryJournal();
    const first = setup(journal);
    const rec1 = await first.outbox.start();
    await first.outbox.emit(started("A"));
    await first.outbox.emit(stopped("A")); // A finished
    await first.outbox.emit(started("B")); // B: stop in flight
    await settle(first.clock, 3);
    first.publisher.mode = "hold";
    const pendingC = await first.outbox.emit(started("C"));
    const pendingB = await first.outbox.emit(stopped("B")); // B finished, but not yet published
    // crash: drop the outbox without close/flush
    const second = setup(journal, {}, new ManualClock(0, 1_750_000_100_000));
    const rec2 = await second.outbox.start();
    expect(rec2.epoch).toBeGreaterThan(rec1.epoch);
    expect(rec2.requeued).toBe(2);
    expect(rec2.recovered.map((e) => [e.incarnation, e.payload.case === "recovered" ? e.payload.value.lastEventType : ""])).toEqual([
      ["C", "eviction.started"],
    ]);
    expect(rec2.recovered[0]?.sequence).toMatchObject({ epoch: rec2.epoch, n: 1n });
    await settle(second.clock, 5);
    expect(second.publisher.stored.has(pendingC.event.id)).toBe(true);
    expect(second.publisher.stored.has(pendingB.event.id)).toBe(true);
    expect(second.outbox.stats().depth).toBe(0);
  });

  it("a restart with everything published re-sends nothing but still recovers unfinished instances", async () => {
    const journal = new MemoryJournal();
    const first = setup(journal);
    await first.outbox.start();
    await first.outbox.emit(started("X"));
    await settle(first.clock, 3);
    await first.outbox.close();
    const second = setup(journal);
    const rec = await second.outbox.start();
    expect(rec.requeued).toBe(0);
    expect(rec.recovered.map((e) => e.incarnation)).toEqual(["X"]);
  });

  it("keeps stop intents durable across a restart until cleared", async () => {
    const journal = new MemoryJournal();
    const first = setup(journal);
    await first.outbox.start();
    await first.outbox.recordStopIntent({ incarnation: "I1", nodeId: "n", model: "m", address: "a:1", reason: "lru" });
    await first.outbox.recordStopIntent({ incarnation: "I2", nodeId: "n", model: "m2", address: "a:2", reason: "admin" });
    expect(journal.records.some((r) => r.kind === "stop-intent" && r.incarnation === "I2")).toBe(true); // durable on resolve
    await first.outbox.clearStopIntent("I1");
    await first.outbox.clearStopIntent("unknown"); // no-op
    const second = setup(journal);
    const rec = await second.outbox.start();
    expect(rec.openStopIntents.map((i) => [i.incarnation, i.reason])).toEqual([["I2", "admin"]]);
    expect(second.outbox.openStopIntents()).toHaveLength(1);
  });

  it("a clear issued while the intent's record is still being journaled clears it (simulation seed 3826)", async () => {
    // The loader journals an abandoned load's intent without waiting, and an
    // operator's forget (or the instance's exit) clears it at once: the clear
    // used to see no intent yet and do nothing, so the intent stayed open for
    // an instance Warden no longer tracked — reaped on the next inventory
    // that lacked it while the process still ran, or stopped after a restart.
    const journal = new MemoryJournal();
    const first = setup(journal);
    await first.outbox.start();
    const recorded = first.outbox.recordStopIntent({ incarnation: "I1", nodeId: "n", model: "m", address: "a:1", reason: "load-abandoned" });
    const cleared = first.outbox.clearStopIntent("I1");
    await Promise.all([recorded, cleared]);
    expect(first.outbox.openStopIntents()).toEqual([]);
    expect(first.outbox.stats().openStopIntents).toBe(0);
    const second = setup(journal);
    const rec = await second.outbox.start();
    expect(rec.openStopIntents).toEqual([]);
  });

  it("a stop intent's write that fails undoes only its own effect", async () => {
    const journal = new MemoryJournal();
    const { outbox } = setup(journal);
    await outbox.start();
    journal.failAppends = true;
    await expect(outbox.recordStopIntent({ incarnation: "I1", nodeId: "n", model: "m", address: "a:1", reason: "lru" })).rejects.toThrow(/not journaled/);
    expect(outbox.openStopIntents()).toEqual([]);
    journal.failAppends = false;
    await outbox.recordStopIntent({ incarnation: "I1", nodeId: "n", model: "m", address: "a:1", reason: "lru" });
    journal.failAppends = true;
    await expect(outbox.clearStopIntent("I1")).rejects.toThrow(/not journaled/);
    expect(outbox.openStopIntents().map((i) => i.incarnation)).toEqual(["I1"]); // still open in the journal
    journal.failAppends = false;
    // A record issued after a clear is the newer word: the clear finishing does not drop it.
    const cleared = outbox.clearStopIntent("I1");
    const again = outbox.recordStopIntent({ incarnation: "I1", nodeId: "n", model: "m", address: "a:1", reason: "admin" });
    await Promise.all([cleared, again]);
    expect(outbox.openStopIntents().map((i) => [i.incarnation, i.reason])).toEqual([["I1", "admin"]]);
  });

  it("guards its lifecycle", async () => {
    const { outbox } = setup();
    await expect(outbox.emit(started("a"))).rejects.toThrow(/state is new/);
    expect(() => outbox.events).toThrow(/failed_precondition/);
    await outbox.start();
    await expect(outbox.start()).rejects.toThrow(/state is running/);
    await outbox.close();
    await expect(outbox.append(outbox.events.create(started("a")))).rejects.toThrow(/state is closed/);
  });

  it("drain waits for every ack, then closes", async () => {
    const { outbox, publisher, clock } = setup();
    await outbox.start();
    publisher.mode = "hold";
    await outbox.emit(started("a"));
    let drained = false;
    const d = outbox.drain().then(() => {
      drained = true;
    });
    await settle(clock, 2);
    expect(drained).toBe(false);
    publisher.release();
    await d;
    expect(drained).toBe(true);
    expect(outbox.stats().published).toBe(1);
  });
});

describe("liveJournalRecords (compaction)", () => {
  it("keeps unpublished events, the last event of unfinished instances, open intents and the epoch", () => {
    const clock = new ManualClock();
    const events = createEventFactory({ clock, newId: createUlidFactory(clock, seededRng(5)), epoch: 5n });
    const a1 = events.create(started("A"));
    const a2 = events.create(stopped("A"));
    const b1 = events.create(started("B"));
    const c1 = events.create(started("C"));
    const intent = { nodeId: "n", model: "m", address: "x", reason: "lru", recordedAtMs: 1 };
    const records: JournalRecord[] = [
      { kind: "epoch", epoch: 6n },
      { kind: "event", event: a1 },
      { kind: "event", event: b1 },
      { kind: "event", event: a2 },
      { kind: "published", eventIds: [a1.id, a2.id, b1.id] },
      { kind: "event", event: c1 },
      { kind: "event", event: c1 }, // a repeated record counts once
      { kind: "stop-intent", incarnation: "B", ...intent },
      { kind: "stop-intent", incarnation: "A", ...intent },
      { kind: "stop-intent-cleared", incarnation: "A" },
    ];
    const live = liveJournalRecords(records);
    const before = reduceJournal(records);
    const after = reduceJournal(live);
    expect([...after.unpublished.keys()]).toEqual([...before.unpublished.keys()]);
    expect([...after.openStopIntents.keys()]).toEqual(["B"]);
    expect(after.maxEpoch).toBe(6n);
    expect(live.flatMap((r) => (r.kind === "event" ? [r.event.incarnation] : []))).toEqual(["B", "C"]);
    expect(after.lastEventByIncarnation.get("B")?.id).toBe(b1.id);
    expect(after.unpublished.has(b1.id)).toBe(false); // kept for `recovered`, not re-sent
    expect(after.lastEventByIncarnation.has("A")).toBe(false);
    expect(liveJournalRecords(live)).toEqual(live); // idempotent
  });
});
