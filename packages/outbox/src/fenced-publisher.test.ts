import { describe, expect, it } from "vitest";
import { Code, ManualClock, createUlidFactory, isWardenError, seededRng } from "@warden/common";
import { createEventFactory } from "@warden/events";
import type { Event } from "@warden/proto";
import { createFencedPublisher, type AuditStreamHead, type ChainCondition, type FencedStreamPort } from "./fenced-publisher.js";
import type { PublishAck } from "./publisher-port.js";
import { started, tick } from "./outbox-fixture.js";

/** A stream that checks conditions as nats-server does (duplicate first), with sends held until `deliver`. */
class ConditionalStream implements FencedStreamPort {
  readonly stored: { id: string; writerEpoch: bigint }[] = [];
  readonly sent: { id: string; condition: ChainCondition }[] = [];
  headReads = 0;
  /** Store, then fail the ack (lost PubAck). */
  loseAcks = false;
  private held: (() => void)[] = [];

  readHead(): Promise<AuditStreamHead | undefined> {
    this.headReads++;
    const last = this.stored.at(-1);
    return Promise.resolve(last === undefined ? undefined : { seq: this.stored.length, msgId: last.id, writerEpoch: last.writerEpoch });
  }

  send(event: Event, condition: ChainCondition): Promise<PublishAck> {
    this.sent.push({ id: event.id, condition });
    return new Promise((resolve, reject) => {
      this.held.push(() => {
        if (this.stored.some((s) => s.id === event.id)) {
          resolve({ duplicate: true });
          return;
        }
        const last = this.stored.at(-1);
        const ok = "expectLastMsgId" in condition ? condition.expectLastMsgId === last?.id : "expectLastSeq" in condition ? condition.expectLastSeq === 0 || condition.expectLastSeq === this.stored.length : true;
        if (!ok) {
          reject(new Error("wrong last msg ID (10070)"));
          return;
        }
        this.stored.push({ id: event.id, writerEpoch: condition.writerEpoch });
        if (this.loseAcks) {
          reject(new Error("no ack within 5000 ms"));
          return;
        }
        resolve({ duplicate: false, streamSequence: this.stored.length });
      });
    });
  }

  /** Delivers what was sent, in order (one connection). */
  deliver(): void {
    const h = this.held;
    this.held = [];
    for (const f of h) f();
  }

  /** Stored directly, as another writer's publish would be. */
  storeForeign(id: string, writerEpoch: bigint): void {
    this.stored.push({ id, writerEpoch });
  }
}

const clock = new ManualClock(0, 1_750_000_000_000);
const factory = createEventFactory({ clock, newId: createUlidFactory(clock, seededRng(5)), epoch: 1n });
const ev = (name: string): Event => factory.create(started(name));
const never = new AbortController().signal;

describe("createFencedPublisher", () => {
  it("chains each publish on the one before it, behind the head read first; a newer epoch's event at the head refuses them and reports it", async () => {
    const stream = new ConditionalStream();
    stream.storeForeign("before", 0n);
    const superseded: bigint[] = [];
    const p = createFencedPublisher({ port: stream, writerEpoch: () => 3n, onSuperseded: (newer) => superseded.push(newer) });
    const [a, b] = [ev("a"), ev("b")];
    const acks = [p.publish(a, never), p.publish(b, never)];
    await tick();
    expect(stream.sent.map((s) => s.condition)).toEqual([
      { writerEpoch: 3n, expectLastMsgId: "before" },
      { writerEpoch: 3n, expectLastMsgId: a.id },
    ]);
    stream.deliver();
    expect((await Promise.all(acks)).map((x) => x.duplicate)).toEqual([false, false]);

    // A newer leader publishes; our next publish (stamped behind b) is refused, and after the head read so is every later one.
    stream.storeForeign("newer", 4n);
    const c = p.publish(ev("c"), never);
    await tick();
    stream.deliver();
    await expect(c).rejects.toThrow(/wrong last/);
    const d = await p.publish(ev("d"), never).catch((err: unknown) => err);
    expect(isWardenError(d, Code.FailedPrecondition)).toBe(true);
    expect(superseded).toEqual([4n]);
    expect(stream.stored.map((s) => s.id)).toEqual(["before", a.id, b.id, "newer"]);
  });

  it("after a failure the head is read again; a head of its own proves the sends before it stored (acknowledged without sending)", async () => {
    const stream = new ConditionalStream();
    const p = createFencedPublisher({ port: stream, writerEpoch: () => 2n });
    const [x, y] = [ev("x"), ev("y")];
    stream.loseAcks = true;
    const first = [p.publish(x, never), p.publish(y, never)].map((a) => a.catch((err: unknown) => err));
    await tick();
    stream.deliver(); // both stored, both acks lost
    expect((await Promise.all(first)).every((r) => r instanceof Error)).toBe(true);
    stream.loseAcks = false;
    // Asked again (the outbox's retry): the head is read first; it is y, ours, so x and y are stored
    // and both are acknowledged without being sent again.
    expect(await p.publish(x, never)).toEqual({ duplicate: true });
    expect(await p.publish(y, never)).toEqual({ duplicate: true });
    expect(stream.headReads).toBe(2);
    expect(stream.sent).toHaveLength(2);
    expect(stream.stored.map((s) => s.id)).toEqual([x.id, y.id]);
  });

  it("sends nothing while the lease is not held", async () => {
    const stream = new ConditionalStream();
    const lease: { epoch: bigint | undefined } = { epoch: undefined };
    const p = createFencedPublisher({ port: stream, writerEpoch: () => lease.epoch });
    await expect(p.publish(ev("a"), never)).rejects.toThrow(/does not hold the lease/);
    expect(stream.sent).toEqual([]);
    lease.epoch = 1n;
    const ok = p.publish(ev("b"), never);
    await tick();
    stream.deliver();
    expect((await ok).duplicate).toBe(false);
  });
});
