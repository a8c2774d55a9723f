/**
 * Audit events name the lease epoch of the HA term that emitted them
 * (`Event.leader_epoch`, 0 without HA), and the nemesis checker judges the
 * audit stream by it: no event of an older leader epoch after one of a newer.
 */
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ManualClock } from "@warden/common";
import { createEventFactory } from "@warden/events";
import { EventSchema, EventSequenceSchema, type Event } from "@warden/proto";
import type { StreamEvent } from "./support/audit-consumer.js";
import { streamProblems } from "./support/nemesis-checks.js";

const loaded: Event["payload"] = { case: "backendLoaded", value: { $typeName: "warden.v1.BackendLoaded", loadDurationMs: 0n } };
let nextId = 0;
function ev(coordinatorEpoch: bigint, leaderEpoch: bigint, incarnation: string, n: bigint): Event {
  nextId++;
  return create(EventSchema, { id: `id-${String(nextId)}`, incarnation, nodeId: "a", model: "m", sequence: create(EventSequenceSchema, { epoch: coordinatorEpoch, n }), leaderEpoch, payload: loaded });
}
const stream = (events: Event[]): StreamEvent[] => events.map((event, i) => ({ seq: i + 1, event }));

describe("Event.leader_epoch", () => {
  it("the event factory stamps the term's lease epoch on every event; 0 without HA", () => {
    let id = 0;
    const newId = (): string => `e${String(++id)}`;
    const ha = createEventFactory({ clock: new ManualClock(), newId, epoch: 100n, leaderEpoch: 4546n });
    expect(ha.create({ incarnation: "i1", payload: loaded }).leaderEpoch).toBe(4546n);
    expect(ha.create({ payload: loaded }).leaderEpoch).toBe(4546n);
    expect(createEventFactory({ clock: new ManualClock(), newId, epoch: 100n }).create({ payload: loaded }).leaderEpoch).toBe(0n);
    expect(() => createEventFactory({ clock: new ManualClock(), newId, epoch: 1n, leaderEpoch: -1n })).toThrow(/leaderEpoch/);
  });

  it("the nemesis checker flags an event of an older leader epoch after a newer one, even when its coordinator epoch grew", () => {
    const s = stream([ev(10n, 3n, "i1", 1n), ev(20n, 7n, "i2", 1n), ev(30n, 3n, "i3", 1n)]);
    const p = streamProblems(s).problems.join("\n");
    expect(p).toContain("(leader epoch 3) at stream sequence 3 after backendLoaded at stream sequence 2 of the newer leader epoch 7");
  });

  it("passes leader epochs that never go back, and events without one (no HA)", () => {
    expect(streamProblems(stream([ev(10n, 0n, "i1", 1n), ev(20n, 3n, "i1", 1n), ev(20n, 3n, "i2", 1n), ev(30n, 7n, "i2", 1n)])).problems).toEqual([]);
  });
});
