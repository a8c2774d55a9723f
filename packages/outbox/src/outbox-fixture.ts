/**
 * The outbox tests' fakes (house style: hand-written fakes only for the pure
 * core's ports): an in-memory journal, a scripted publisher, and an outbox
 * wired to them on a manual clock. Not exported from the package index.
 */
import { create } from "@bufbuild/protobuf";
import { EvictionReason, EvictionStartedSchema, EvictionStoppedSchema, type Event } from "@warden/proto";
import { ManualClock, createUlidFactory, seededRng, type Rng } from "@warden/common";
import type { EventInit } from "@warden/events";
import { createOutbox } from "./outbox.js";
import type { OutboxHealth, OutboxOptions } from "./outbox-types.js";
import type { Journal } from "./journal-port.js";
import type { JournalRecord } from "./journal-record.js";
import type { PublishAck, Publisher } from "./publisher-port.js";

/** In-memory journal: `records` is what survived (every append is "fsync'd" on resolve). */
export class MemoryJournal implements Journal {
  records: JournalRecord[] = [];
  failAppends = false;
  async append(record: JournalRecord): Promise<void> {
    await Promise.resolve();
    if (this.failAppends) throw new Error("disk full");
    this.records.push(record);
  }
  replay(): Promise<readonly JournalRecord[]> {
    return Promise.resolve([...this.records]);
  }
  eventIds(): string[] {
    return this.records.flatMap((r) => (r.kind === "event" ? [r.event.id] : []));
  }
}

/** Publisher whose answers are scripted: ok, fail, or held until released. */
export class FakePublisher implements Publisher {
  onReady?: (listener: () => void) => () => void;
  mode: "ok" | "fail" | "hold" | "random" = "ok";
  failRate = 0.5;
  constructor(
    private readonly journal: MemoryJournal,
    private readonly rng: Rng = seededRng(9),
  ) {}
  readonly stored = new Map<string, number>(); // id -> times stored (as a stream would, without dedup)
  readonly attempts: string[] = [];
  readonly journaledBeforePublish: boolean[] = [];
  private held: (() => void)[] = [];
  maxConcurrent = 0;
  private concurrent = 0;
  publish(event: Event): Promise<PublishAck> {
    this.attempts.push(event.id);
    this.journaledBeforePublish.push(this.journal.eventIds().includes(event.id));
    this.concurrent++;
    this.maxConcurrent = Math.max(this.maxConcurrent, this.concurrent);
    const done = <T>(v: T): T => {
      this.concurrent--;
      return v;
    };
    const ok = (): PublishAck => {
      const n = this.stored.get(event.id) ?? 0;
      this.stored.set(event.id, n + 1);
      return done({ duplicate: n > 0 });
    };
    const fail = (): Promise<never> => {
      done(0);
      return Promise.reject(new Error("no responders"));
    };
    if (this.mode === "fail") return fail();
    if (this.mode === "random" && this.rng.next() < this.failRate) return fail();
    if (this.mode === "hold") return new Promise((resolve) => this.held.push(() => { resolve(ok()); }));
    return Promise.resolve(ok());
  }
  release(): void {
    const h = this.held;
    this.held = [];
    for (const f of h) f();
  }
}

// eslint-disable-next-line no-restricted-globals -- test helper only: yields to the event loop between ManualClock steps
export const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

export async function settle(clock: ManualClock, rounds = 50, stepMs = 1_000): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    await tick();
    clock.advance(stepMs);
  }
  await tick();
}

export function started(incarnation: string, nodeId = "n1", model = "m1"): EventInit {
  return {
    nodeId,
    model,
    incarnation,
    address: "127.0.0.1:7000",
    payload: { case: "evictionStarted", value: create(EvictionStartedSchema, { reason: EvictionReason.IDLE }) },
  };
}
export function stopped(incarnation: string, nodeId = "n1", model = "m1"): EventInit {
  return { nodeId, model, incarnation, payload: { case: "evictionStopped", value: create(EvictionStoppedSchema, {}) } };
}

export function setup(journal = new MemoryJournal(), extra: Partial<OutboxOptions> = {}, clock = new ManualClock(0, 1_750_000_000_000), publisherSeed = 9) {
  const publisher = new FakePublisher(journal, seededRng(publisherSeed));
  const healths: OutboxHealth[] = [];
  const outbox = createOutbox({
    journal,
    publisher,
    clock,
    rng: seededRng(3),
    newId: createUlidFactory(clock, seededRng(4)),
    onHealthChange: (h) => healths.push(h),
    ...extra,
  });
  return { journal, publisher, outbox, clock, healths };
}
