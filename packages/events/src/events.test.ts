import { describe, expect, it } from "vitest";
import { ManualClock, createUlidFactory, seededRng, isWardenError, Code } from "@warden/common";
import { create } from "@bufbuild/protobuf";
import { BackendLoadFailedSchema, EventSchema } from "@warden/proto";
import {
  allEventsSubject,
  createEventFactory,
  decodeEvent,
  encodeEvent,
  eventFilterSubject,
  eventSubject,
  eventToJson,
  eventTypeOf,
  eventTypes,
  isTerminalEvent,
  isTerminalEventType,
  matchesEventFilter,
  parseEventSubject,
  parseEventType,
  payloadCaseOf,
  RecentIdSet,
  subjectForEvent,
  eventTypeOfCase,
} from "./index.js";
import { evictionStarted, evictionStopped, recoveredPayload } from "./test-events.js";

function factory(epoch = 7n) {
  const clock = new ManualClock(0, 1_750_000_000_000);
  return { clock, events: createEventFactory({ clock, newId: createUlidFactory(clock, seededRng(1)), epoch }) };
}

describe("event types", () => {
  it("maps every payload case to a distinct dotted name and back", () => {
    expect(new Set(eventTypes).size).toBe(eventTypes.length);
    for (const t of eventTypes) expect(eventTypeOfCase(payloadCaseOf(t))).toBe(t);
    expect(eventTypeOfCase("backendLoadFailed")).toBe("backend.load-failed");
    expect(eventTypeOfCase("policyLimitExceeded")).toBe("policy.limit-exceeded");
    expect(eventTypeOfCase("recovered")).toBe("recovered");
  });

  it("rejects unknown names and payload-less events", () => {
    expect(() => parseEventType("eviction.exploded")).toThrow(/unknown event type/);
    expect(() => eventTypeOf(create(EventSchema))).toThrow(/no payload/);
  });
});

describe("subjects", () => {
  it("builds warden.events.<type>.<node>.<model> with escaped tokens", () => {
    expect(eventSubject("eviction.started", "gpu.1", "llama_8b")).toBe("warden.events.eviction.started.gpu_2E1.llama_5F8b");
    expect(eventSubject("recovered", "n", "*")).toBe("warden.events.recovered.n._2A");
    expect(eventSubject("node.registered", "n", "")).toBe("warden.events.node.registered.n._");
  });

  it("parses what it builds, for one- and two-word types", () => {
    for (const type of eventTypes) {
      expect(parseEventSubject(eventSubject(type, "a.b>", "c d"))).toEqual({ type, nodeId: "a.b>", model: "c d" });
    }
    expect(() => parseEventSubject("warden.events.bogus.a.b")).toThrow();
    expect(() => parseEventSubject("other.x.y.z")).toThrow();
  });

  it("uses the event's type, node and model", () => {
    const { events } = factory();
    const e = events.create(evictionStarted({ nodeId: "n1", model: "m1", incarnation: "i1" }));
    expect(subjectForEvent(e)).toBe("warden.events.eviction.started.n1.m1");
  });
});

describe("EventFactory", () => {
  it("stamps id, wall time and (epoch, n) counted per incarnation", () => {
    const { clock, events } = factory(7n);
    const a1 = events.create(evictionStarted({ nodeId: "n", model: "m", incarnation: "A" }));
    clock.advance(5);
    const b1 = events.create(evictionStarted({ nodeId: "n", model: "m2", incarnation: "B" }));
    const a2 = events.create(evictionStopped({ nodeId: "n", model: "m", incarnation: "A" }));
    expect([a1.sequence?.epoch, a1.sequence?.n]).toEqual([7n, 1n]);
    expect([b1.sequence?.epoch, b1.sequence?.n]).toEqual([7n, 1n]);
    expect([a2.sequence?.epoch, a2.sequence?.n]).toEqual([7n, 2n]);
    expect(new Set([a1.id, b1.id, a2.id]).size).toBe(3);
    expect(Number(b1.time?.seconds) * 1000 + (b1.time?.nanos ?? 0) / 1e6).toBe(1_750_000_000_005);
  });

  it("gives events without an incarnation n = 0", () => {
    const { events } = factory();
    const e = events.create({ nodeId: "n", payload: recoveredPayload("x") });
    expect(e.sequence?.n).toBe(0n);
  });

  it("keeps at most maxTrackedIncarnations counters", () => {
    const clock = new ManualClock();
    const events = createEventFactory({ clock, newId: createUlidFactory(clock, seededRng(2)), epoch: 1n, maxTrackedIncarnations: 2 });
    const mk = (inc: string) => events.create(evictionStarted({ nodeId: "n", model: "m", incarnation: inc })).sequence?.n;
    expect(mk("A")).toBe(1n);
    expect(mk("B")).toBe(1n);
    expect(mk("A")).toBe(2n); // A is now most recent
    expect(mk("C")).toBe(1n); // evicts B
    expect(mk("A")).toBe(3n);
    expect(mk("B")).toBe(1n); // B was forgotten
  });
});

describe("terminal classification", () => {
  it("ends the story only for stopped, reaped, load-failed, exited and forgotten", () => {
    const terminal = eventTypes.filter(isTerminalEventType);
    expect(terminal.sort()).toEqual(["backend.exited", "backend.load-failed", "eviction.stopped", "instance.forgotten", "leftover.reaped"]);
    const { events } = factory();
    expect(isTerminalEvent(events.create(evictionStarted({ nodeId: "n", model: "m", incarnation: "i" })))).toBe(false);
    expect(isTerminalEvent(events.create(evictionStopped({ nodeId: "n", model: "m", incarnation: "i" })))).toBe(true);
    expect(isTerminalEvent(events.create({ incarnation: "i", payload: recoveredPayload("eviction.started") }))).toBe(false);
    // A start sent with no answer either way may run on its node: not an end, so a takeover restores it.
    const failed = (outcomeUnknown: boolean) => events.create({ incarnation: "i", nodeId: "n", model: "m", payload: { case: "backendLoadFailed", value: create(BackendLoadFailedSchema, { code: "UNAVAILABLE", outcomeUnknown }) } });
    expect(isTerminalEvent(failed(false))).toBe(true);
    expect(isTerminalEvent(failed(true))).toBe(false);
  });
});

describe("codec", () => {
  it("round-trips protobuf binary and renders JSON with a type field", () => {
    const { events } = factory(3n);
    const e = events.create(evictionStarted({ nodeId: "n", model: "m", incarnation: "i" }));
    const back = decodeEvent(encodeEvent(e));
    expect(back).toEqual(e);
    const json = eventToJson(e);
    expect(json.type).toBe("eviction.started");
    expect(json["id"]).toBe(e.id);
    expect(json["sequence"]).toEqual({ epoch: "3", n: "1" });
    expect(json["evictionStarted"]).toMatchObject({ reason: "EVICTION_REASON_LRU", trigger: "test" });
    expect(Object.keys(json)[0]).toBe("type");
  });

  it("rejects garbage and payload-less events as INVALID_ARGUMENT", () => {
    const check = (f: () => unknown) => {
      try {
        f();
        expect.unreachable();
      } catch (err) {
        expect(isWardenError(err, Code.InvalidArgument)).toBe(true);
      }
    };
    check(() => decodeEvent(new Uint8Array([0xff, 0xff, 0xff])));
    check(() => decodeEvent(encodeEvent(create(EventSchema, { id: "x" }))));
  });
});

describe("filters", () => {
  const { events } = factory();
  const e = events.create(evictionStarted({ nodeId: "gpu.1", model: "llama", incarnation: "i" }));

  it("matches every criterion", () => {
    expect(matchesEventFilter(e, {})).toBe(true);
    expect(matchesEventFilter(e, { types: ["eviction.started", "recovered"], nodeId: "gpu.1", model: "llama" })).toBe(true);
    expect(matchesEventFilter(e, { types: ["eviction.stopped"] })).toBe(false);
    expect(matchesEventFilter(e, { nodeId: "gpu" })).toBe(false);
    expect(matchesEventFilter(e, { model: "other" })).toBe(false);
  });

  it("builds the narrowest single server-side subject", () => {
    expect(eventFilterSubject({})).toBe(allEventsSubject);
    expect(eventFilterSubject({ types: ["eviction.started"], nodeId: "gpu.1" })).toBe("warden.events.eviction.started.gpu_2E1.*");
    expect(eventFilterSubject({ types: ["recovered"], model: "m" })).toBe("warden.events.recovered.*.m");
    expect(eventFilterSubject({ types: ["eviction.started", "eviction.failed"], model: "m" })).toBe("warden.events.eviction.*.*.m");
    expect(eventFilterSubject({ types: ["eviction.started", "recovered"] })).toBe(allEventsSubject);
    expect(eventFilterSubject({ nodeId: "n" })).toBe(allEventsSubject);
  });
});

describe("RecentIdSet", () => {
  it("reports duplicates and forgets the oldest beyond capacity", () => {
    const s = new RecentIdSet(2);
    expect(s.add("a")).toBe(true);
    expect(s.add("a")).toBe(false);
    expect(s.add("b")).toBe(true);
    expect(s.add("c")).toBe(true);
    expect(s.has("a")).toBe(false);
    expect(s.size).toBe(2);
    expect(() => new RecentIdSet(0)).toThrow();
  });
});
