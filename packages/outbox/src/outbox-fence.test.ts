import { describe, expect, it } from "vitest";
import { ManualClock, StaleLeaderEpochError, isStaleLeaderEpoch } from "@warden/common";
import type { JournalRecord } from "./journal-record.js";
import { MemoryJournal, settle, setup, started } from "./outbox-fixture.js";

/** A journal that refuses like a fenced replicated one: transiently (`fail`), or for good once a newer leader wrote (`superseded`). */
class FencedJournal extends MemoryJournal {
  mode: "ok" | "fail" | "superseded" = "ok";
  attempts = 0;
  override async append(record: JournalRecord): Promise<void> {
    this.attempts++;
    await Promise.resolve();
    if (this.mode === "superseded") throw new StaleLeaderEpochError(4n, 5n);
    if (this.mode === "fail") throw new Error("no quorum");
    this.records.push(record);
  }
}

describe("outbox under the leader-epoch fence", () => {
  it("a stale-epoch refusal is terminal: the event is not deferred, what waited in the lane is dropped, nothing is retried", async () => {
    const journal = new FencedJournal();
    const superseded: unknown[] = [];
    const { outbox, publisher, clock } = setup(journal, { onSuperseded: (e) => superseded.push(e) });
    await outbox.start();
    journal.mode = "fail";
    expect((await outbox.emit(started("a"))).outcome).toBe("deferred");
    expect((await outbox.emit(started("b"))).outcome).toBe("deferred");
    journal.mode = "superseded";
    // The lane's next attempt meets the newer leader's record: both waiting events are an ex-leader's word.
    await settle(clock, 10, 5_000);
    expect(superseded).toHaveLength(1);
    expect(isStaleLeaderEpoch(superseded[0])).toBe(true);
    expect(outbox.stats().depth).toBe(0);
    const attempts = journal.attempts;
    // A new event is refused at once, typed, and never joins a lane.
    await expect(outbox.emit(started("c"))).rejects.toSatisfy(isStaleLeaderEpoch);
    await settle(clock, 20, 5_000);
    expect(journal.attempts).toBe(attempts + 1);
    expect(outbox.stats().depth).toBe(0);
    expect(publisher.attempts).toEqual([]);
    expect(journal.eventIds()).toEqual([]);
  });

  it("publishes nothing while mayPublish is false; the journaled events go out once it is true again", async () => {
    let leader = true;
    const { outbox, publisher, clock } = setup(undefined, { mayPublish: () => leader });
    await outbox.start();
    leader = false;
    for (let i = 0; i < 5; i++) await outbox.emit(started(`i${String(i)}`));
    await settle(clock, 20, 1_000);
    expect(publisher.attempts).toEqual([]);
    expect(outbox.stats().depth).toBe(5);
    leader = true;
    await settle(clock, 5, 1_000);
    expect(publisher.stored.size).toBe(5);
    expect(outbox.stats().depth).toBe(0);
  });

  it("replayed events of an older leader epoch are all acknowledged before the first event of this term is sent", async () => {
    const journal = new MemoryJournal();
    // The predecessor (leader epoch 4) journaled three events and published none.
    const before = setup(journal, { leaderEpoch: 4n, mayPublish: () => false });
    await before.outbox.start();
    for (const i of ["o1", "o2", "o3"]) await before.outbox.emit(started(i));
    await before.outbox.close();
    // Another clock: the fixture's id factory would otherwise repeat the predecessor's ids.
    const { outbox, publisher, clock } = setup(journal, { leaderEpoch: 5n }, new ManualClock(0, 1_750_000_500_000));
    publisher.mode = "hold";
    await outbox.start();
    await outbox.emit(started("n1"));
    await settle(clock, 3, 10);
    const epochOf = new Map(journal.records.flatMap((r) => (r.kind === "event" ? [[r.event.id, r.event.leaderEpoch] as const] : [])));
    // The older ones are in flight; this term's waits behind them.
    expect(publisher.attempts.map((id) => epochOf.get(id))).toEqual([4n, 4n, 4n]);
    publisher.release();
    await settle(clock, 3, 10);
    publisher.release();
    await settle(clock, 3, 10);
    // This term's: the three `recovered` events its start emitted for the unfinished evictions, then n1.
    expect(publisher.attempts.map((id) => epochOf.get(id))).toEqual([4n, 4n, 4n, 5n, 5n, 5n, 5n]);
    expect(outbox.stats().depth).toBe(0);
  });
});

