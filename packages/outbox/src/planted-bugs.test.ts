import { ManualClock, createUlidFactory, seededRng } from "@warden/common";
import { plantBugs, type PlantedBug } from "@warden/common/testing/planted-bugs";
import { create } from "@bufbuild/protobuf";
import { EvictionReason, EvictionStartedSchema, type Event } from "@warden/proto";
import { afterEach, describe, expect, it } from "vitest";
import type { Journal } from "./journal-port.js";
import type { JournalRecord } from "./journal-record.js";
import { createOutbox } from "./outbox.js";
import type { PublishAck, Publisher } from "./publisher-port.js";

// The outbox's planted bug (packages/common/src/planted-bugs.ts) changes its
// behaviour only when planted: with the switch off every published event was
// journaled first; on, one is published while its append is still running.

let undo: (() => void) | undefined;
afterEach(() => {
  undo?.();
  undo = undefined;
});

/** A journal whose appends complete only when the test releases them (a slow fsync). */
class SlowJournal implements Journal {
  readonly records: JournalRecord[] = [];
  private readonly held: (() => void)[] = [];
  append(record: JournalRecord): Promise<void> {
    if (record.kind !== "event") {
      this.records.push(record);
      return Promise.resolve();
    }
    return new Promise((resolve) =>
      this.held.push(() => {
        this.records.push(record);
        resolve();
      }),
    );
  }
  release(): void {
    for (const r of this.held.splice(0)) r();
  }
  replay(): Promise<readonly JournalRecord[]> {
    return Promise.resolve([...this.records]);
  }
  has(id: string): boolean {
    return this.records.some((r) => r.kind === "event" && r.event.id === id);
  }
}

async function publishedBeforeJournaled(bug: PlantedBug | undefined): Promise<boolean[]> {
  undo?.();
  undo = bug === undefined ? undefined : plantBugs([bug]);
  const clock = new ManualClock(0, 1_750_000_000_000);
  const journal = new SlowJournal();
  const seen: boolean[] = [];
  const publisher: Publisher = {
    publish: (e: Event): Promise<PublishAck> => {
      seen.push(!journal.has(e.id));
      return Promise.resolve({ duplicate: false });
    },
  };
  const outbox = createOutbox({ journal, publisher, clock, rng: seededRng(3), newId: createUlidFactory(clock, seededRng(4)) });
  await outbox.start();
  const emitted = outbox.emit({ nodeId: "n1", model: "m1", address: "a", incarnation: "i1", payload: { case: "evictionStarted", value: create(EvictionStartedSchema, { reason: EvictionReason.ADMIN }) } });
  for (let i = 0; i < 5; i++) await Promise.resolve();
  journal.release();
  await emitted;
  await outbox.flushed();
  await outbox.close();
  return seen;
}

describe("planted bug in the outbox", () => {
  it("publish-before-append: an event reaches the publisher before its journal append is durable", async () => {
    expect(await publishedBeforeJournaled(undefined)).toEqual([false]);
    expect(await publishedBeforeJournaled("publish-before-append")).toEqual([true]);
  });
});
