import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { NodeRegisteredSchema, OrphanAdoptedSchema } from "@warden/proto";
import { eventTypeOf, type EventInit } from "@warden/events";
import { reduceJournal } from "./reduce-journal.js";
import { settle, setup, started, stopped } from "./outbox-fixture.js";

function orphan(pid: number, nodeId = "n1"): EventInit {
  return { nodeId, incarnation: `pid:${String(pid)}`, payload: { case: "orphanAdopted", value: create(OrphanAdoptedSchema, { pid, count: 1, pids: [pid] }) } };
}
function registered(nodeId: string): EventInit {
  return { nodeId, payload: { case: "nodeRegistered", value: create(NodeRegisteredSchema, {}) } };
}

describe("outbox priority when full", () => {
  // One publish at a time, held: the first event is in flight, the rest stay queued.
  const full = () => setup(undefined, { capacity: 6, maxInFlight: 1 });

  it("an eviction displaces the youngest queued low-priority event; low-priority events are refused; the displaced one is never published, not even after a restart", async () => {
    const { outbox, publisher, journal, clock, healths } = full();
    await outbox.start();
    publisher.mode = "hold";
    for (let i = 1; i <= 5; i++) expect((await outbox.emit(orphan(i))).outcome).toBe("queued");
    expect((await outbox.emit(registered("n2"))).outcome).toBe("queued");
    expect(outbox.stats().depth).toBe(6);
    // full of peer reports: one more is refused …
    expect((await outbox.emit(orphan(99))).outcome).toBe("dropped");
    // … but an eviction is never dropped to make room for them
    const ev = await outbox.emit(started("I1"));
    const ev2 = await outbox.emit(stopped("I1"));
    expect([ev.outcome, ev2.outcome]).toEqual(["queued", "queued"]);
    expect(outbox.stats()).toMatchObject({ depth: 6, dropped: 3, displaced: 2, droppedCritical: 0 });
    expect(outbox.health()).toMatchObject({ status: "not-serving", reason: expect.stringContaining("3 events dropped so far, 0 of them critical") as string });
    expect(healths.at(-1)?.status).toBe("not-serving");
    publisher.mode = "ok";
    publisher.release();
    await settle(clock, 10);
    const publishedTypes = [...publisher.stored.keys()].map((id) => journal.records.flatMap((r) => (r.kind === "event" && r.event.id === id ? [r.event] : []))[0]);
    // the youngest low-priority ones (node.registered, orphan 5) gave way; order is append order
    expect(publishedTypes.map((e) => (e === undefined ? "?" : `${eventTypeOf(e)} ${e.incarnation || e.nodeId}`))).toEqual([
      "orphan.adopted pid:1",
      "orphan.adopted pid:2",
      "orphan.adopted pid:3",
      "orphan.adopted pid:4",
      "eviction.started I1",
      "eviction.stopped I1",
    ]);
    expect(outbox.stats()).toMatchObject({ depth: 0, published: 6 });
    expect(outbox.health()).toEqual({ status: "serving" });
    await outbox.close();
    // the displaced events are settled in the journal: a restart does not send them
    expect(reduceJournal(journal.records).unpublished.size).toBe(0);
    const again = setup(journal);
    expect((await again.outbox.start()).requeued).toBe(0);
    await again.outbox.close();
  });

  it("a critical event is dropped (and counted as critical) only when no low-priority event is queued to give way", async () => {
    const { outbox, publisher } = full();
    await outbox.start();
    publisher.mode = "hold";
    expect((await outbox.emit(orphan(1))).outcome).toBe("queued"); // in flight: cannot be displaced
    for (let i = 0; i < 5; i++) expect((await outbox.emit(started(`c${String(i)}`))).outcome).toBe("queued");
    expect((await outbox.emit(started("late"))).outcome).toBe("dropped");
    expect((await outbox.emit(orphan(2))).outcome).toBe("dropped");
    expect(outbox.stats()).toMatchObject({ dropped: 2, droppedCritical: 1, displaced: 0 });
    expect(outbox.health()).toMatchObject({ status: "not-serving", reason: expect.stringContaining("1 of them critical") as string });
    publisher.release();
    await outbox.close();
  });

  it("a custom priorityOf decides what gives way", async () => {
    const { outbox, publisher } = setup(undefined, { capacity: 2, maxInFlight: 1, priorityOf: (e) => (e.incarnation.startsWith("low") ? "low" : "critical") });
    await outbox.start();
    publisher.mode = "hold";
    await outbox.emit(started("first"));
    await outbox.emit(started("low-1"));
    expect((await outbox.emit(orphan(7))).outcome).toBe("queued"); // an orphan is critical under this rule
    expect(outbox.stats()).toMatchObject({ displaced: 1, droppedCritical: 0 });
    publisher.release();
    await outbox.close();
  });
});
