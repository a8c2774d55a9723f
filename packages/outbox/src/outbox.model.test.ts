/**
 * Model-based property test of the outbox: random appends, publisher failures,
 * held acks, overflows, stop intents and crashes (the outbox dropped without
 * flushing and a new one started on the same journal). Checked after each
 * restart and at quiescence against a simple model:
 *  - no queued event is ever lost: each reaches the stream at least once;
 *  - drops happen only when the outbox is full, and are all counted;
 *  - open stop intents survive restarts exactly;
 *  - `recovered` is emitted exactly for instances whose last event is not terminal.
 */
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { create } from "@bufbuild/protobuf";
import { EvictionStartedSchema, EvictionStoppedSchema, type Event } from "@warden/proto";
import { ManualClock, createUlidFactory, seededRng } from "@warden/common";
import type { EventInit } from "@warden/events";
import { createOutbox } from "./outbox.js";
import type { Outbox } from "./outbox-types.js";
import type { Journal } from "./journal-port.js";
import type { JournalRecord } from "./journal-record.js";
import type { PublishAck, Publisher } from "./publisher-port.js";

type Op =
  | { t: "append"; inc: number; terminal: boolean }
  | { t: "mode"; mode: "ok" | "fail" | "hold" }
  | { t: "release" }
  | { t: "advance"; ms: number }
  | { t: "intent"; inc: number }
  | { t: "clear"; inc: number }
  | { t: "crash" };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ t: fc.constant("append" as const), inc: fc.integer({ min: 0, max: 5 }), terminal: fc.boolean() }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant("mode" as const), mode: fc.constantFrom("ok" as const, "fail" as const, "hold" as const) }) },
  { weight: 1, arbitrary: fc.constant({ t: "release" as const }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant("advance" as const), ms: fc.integer({ min: 0, max: 5_000 }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("intent" as const), inc: fc.integer({ min: 0, max: 5 }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("clear" as const), inc: fc.integer({ min: 0, max: 5 }) }) },
  { weight: 1, arbitrary: fc.constant({ t: "crash" as const }) },
);

class Journal_ implements Journal {
  records: JournalRecord[] = [];
  async append(record: JournalRecord): Promise<void> {
    await Promise.resolve();
    this.records.push(record);
  }
  replay(): Promise<readonly JournalRecord[]> {
    return Promise.resolve([...this.records]);
  }
}

/** The stream, shared by every incarnation of the outbox. */
class Stream {
  readonly stored = new Map<string, number>();
  mode: "ok" | "fail" | "hold" = "ok";
  held: (() => void)[] = [];
  publisher(): Publisher {
    return {
      publish: (event: Event): Promise<PublishAck> => {
        const store = (): PublishAck => {
          const n = this.stored.get(event.id) ?? 0;
          this.stored.set(event.id, n + 1);
          return { duplicate: n > 0 };
        };
        if (this.mode === "fail") return Promise.reject(new Error("down"));
        if (this.mode === "hold") return new Promise((resolve) => this.held.push(() => { resolve(store()); }));
        return Promise.resolve(store());
      },
    };
  }
  release(): void {
    const h = this.held;
    this.held = [];
    for (const f of h) f();
  }
}

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

function init(inc: number, terminal: boolean): EventInit {
  return terminal
    ? { nodeId: "n", model: `m${inc}`, incarnation: `I${inc}`, payload: { case: "evictionStopped", value: create(EvictionStoppedSchema, {}) } }
    : { nodeId: "n", model: `m${inc}`, incarnation: `I${inc}`, payload: { case: "evictionStarted", value: create(EvictionStartedSchema, {}) } };
}

describe("outbox model", () => {
  it("never loses a queued event, never drops silently, and recovers intents and unfinished instances across crashes", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 60 }), fc.integer({ min: 2, max: 12 }), fc.integer(), async (ops, capacity, seed) => {
        const clock = new ManualClock(0, 1_750_000_000_000);
        const journal = new Journal_();
        const stream = new Stream();
        const newId = createUlidFactory(clock, seededRng(seed));
        let rngSeed = seed;
        const mustDeliver = new Set<string>();
        const lastTerminal = new Map<string, boolean>(); // incarnation → last event terminal?
        const intents = new Set<string>();
        let lastEpoch = 0n;

        const boot = async (): Promise<Outbox> => {
          const o = createOutbox({ journal, publisher: stream.publisher(), clock, rng: seededRng(rngSeed++), newId, capacity, maxInFlight: 4 });
          const rec = await o.start();
          expect(rec.epoch).toBeGreaterThan(lastEpoch);
          lastEpoch = rec.epoch;
          expect(new Set(rec.openStopIntents.map((i) => i.incarnation))).toEqual(intents);
          const unfinished = [...lastTerminal].filter(([, t]) => !t).map(([inc]) => inc).sort();
          const recoveredFor = rec.recovered.map((e) => e.incarnation).sort();
          // A recovered event may itself be dropped when the replayed backlog fills the outbox.
          for (const inc of recoveredFor) expect(unfinished).toContain(inc);
          if (o.stats().dropped === 0) expect(recoveredFor).toEqual(unfinished);
          for (const e of rec.recovered) mustDeliver.add(e.id);
          return o;
        };

        let outbox = await boot();
        let drops = 0;
        for (const op of ops) {
          switch (op.t) {
            case "append": {
              const before = outbox.stats().depth;
              const { event, outcome } = await outbox.emit(init(op.inc, op.terminal));
              if (outcome === "queued") {
                mustDeliver.add(event.id);
                lastTerminal.set(event.incarnation, op.terminal);
              } else {
                expect(before).toBeGreaterThanOrEqual(capacity); // drops only when full
                expect(outbox.health().status).toBe("not-serving");
                drops++;
              }
              expect(outbox.stats().dropped).toBe(drops);
              break;
            }
            case "mode":
              stream.mode = op.mode;
              break;
            case "release":
              stream.release();
              break;
            case "advance":
              clock.advance(op.ms);
              break;
            case "intent":
              await outbox.recordStopIntent({ incarnation: `I${op.inc}`, nodeId: "n", model: `m${op.inc}`, address: "a", reason: "lru" });
              intents.add(`I${op.inc}`);
              break;
            case "clear":
              await outbox.clearStopIntent(`I${op.inc}`);
              intents.delete(`I${op.inc}`);
              break;
            case "crash":
              // The process dies: nothing more from this outbox (its held acks are lost with it).
              void outbox.close();
              stream.held = [];
              outbox = await boot();
              drops = outbox.stats().dropped; // a recovered event may be dropped at start
              break;
          }
          await tick();
        }
        // Quiescence: the stream works again; everything queued gets there.
        stream.mode = "ok";
        stream.release();
        for (let i = 0; i < 200 && outbox.stats().depth > 0; i++) {
          stream.release();
          clock.advance(2_500);
          await tick();
        }
        expect(outbox.stats().depth).toBe(0);
        for (const id of mustDeliver) expect(stream.stored.get(id) ?? 0, `event ${id}`).toBeGreaterThanOrEqual(1);
        expect(outbox.health().status).toBe("serving");
      }),
      { numRuns: 1_000 },
    );
  });
});
