/**
 * The HA nemesis's checker and plan on hand-made inputs: each check flags the
 * fault it exists for and passes a clean history, and a seed decides the same
 * plan every time (test/ha-nemesis.test.ts runs them against real processes).
 */
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { EvictionReason, EventSchema, EventSequenceSchema, type Event } from "@warden/proto";
import type { StreamEvent } from "./support/audit-consumer.js";
import { disappearanceProblems, exclusivityProblems, streamProblems } from "./support/nemesis-checks.js";
import { baseFaultKinds, nemesisPlan } from "./support/nemesis-plan.js";
import { longestOutageMs } from "./support/http-leader-caller.js";

let nextId = 0;
function ev(epoch: bigint, n: bigint, payload: Event["payload"], o: { incarnation?: string; id?: string; nodeId?: string } = {}): Event {
  nextId++;
  return create(EventSchema, { id: o.id ?? `id-${String(nextId)}`, incarnation: o.incarnation ?? "", nodeId: o.nodeId ?? "a", model: "m", sequence: create(EventSequenceSchema, { epoch, n }), payload });
}
const leader = (lease: bigint): Event["payload"] => ({ case: "coordinatorLeader", value: { $typeName: "warden.v1.CoordinatorLeader", holder: "h", epoch: lease, address: "", previousHolder: "", previousEpoch: 0n, resumed: false } });
const started: Event["payload"] = { case: "evictionStarted", value: { $typeName: "warden.v1.EvictionStarted", reason: EvictionReason.IDLE, trigger: "", wasBusy: false, force: false, openRequestIds: [] } };
const loaded: Event["payload"] = { case: "backendLoaded", value: { $typeName: "warden.v1.BackendLoaded", loadDurationMs: 0n } };
const stream = (events: Event[]): StreamEvent[] => events.map((event, i) => ({ seq: i + 1, event }));

describe("nemesis checker", () => {
  it("a clean history passes: epochs grow, sequences gap-free, the stop decided by the leader in force", () => {
    const s = stream([ev(10n, 0n, leader(3n)), ev(10n, 1n, loaded, { incarnation: "i1" }), ev(20n, 0n, leader(7n)), ev(20n, 1n, started, { incarnation: "i1" })]);
    expect(streamProblems(s).problems).toEqual([]);
    expect(disappearanceProblems([{ pid: 1, nodeId: "a", incarnation: "i1", lastSeen: 1, goneBy: 2 }], s).problems).toEqual([]);
  });

  it("flags an older epoch after a newer one, a duplicate id, a sequence gap and a lease epoch going back", () => {
    const dup = ev(20n, 1n, loaded, { incarnation: "i2" });
    const s = stream([ev(10n, 0n, leader(3n)), ev(20n, 0n, leader(7n)), dup, ev(10n, 0n, leader(5n)), dup, ev(20n, 3n, started, { incarnation: "i2" })]);
    const p = streamProblems(s).problems.join("\n");
    expect(p).toContain("after coordinatorLeader at stream sequence 2 of the newer epoch 20");
    expect(p).toContain("lease epoch 5");
    expect(p).toContain(`duplicate id ${dup.id}`);
    expect(p).toContain("sequence numbers 1,3 are not 1..2");
  });

  it("flags a ready backend gone with no eviction, and one stopped by a superseded term; not a start that never became ready", () => {
    const s = stream([ev(10n, 0n, leader(3n)), ev(10n, 1n, loaded, { incarnation: "i1" }), ev(20n, 0n, leader(7n)), ev(10n, 1n, started, { incarnation: "i3" })]);
    const r = disappearanceProblems([
      { pid: 1, nodeId: "a", incarnation: "i1", lastSeen: 1, goneBy: 2 },
      { pid: 3, nodeId: "a", incarnation: "i3", lastSeen: 1, goneBy: 2 },
      { pid: 4, nodeId: "a", incarnation: "never-ready", lastSeen: 1, goneBy: 2 },
    ], s);
    expect(r.problems).toHaveLength(2);
    expect(r.problems[0]).toContain("a/i1 (pid 1) was ready and disappeared");
    expect(r.problems[1]).toContain("a/i3: stopped by an eviction.started of coordinator epoch 10, emitted after the newer epoch 20");
    expect(r.failedStarts).toBe(1);
  });

  it("an orphan's stop is found under its pid on its node (pid:<n>) and judged like any eviction; the same pid on another node is not it", () => {
    const orphanStop = (epoch: bigint, node: string): Event => ev(epoch, 1n, { case: "evictionStarted", value: { $typeName: "warden.v1.EvictionStarted", reason: EvictionReason.ORPHAN, trigger: "orphan grace", wasBusy: false, force: false, openRequestIds: [] } }, { incarnation: "pid:42", nodeId: node });
    const gone = [{ pid: 42, nodeId: "a", incarnation: "i9", lastSeen: 1, goneBy: 2 }];
    const adopted: Event["payload"] = { case: "instanceAdopted", value: { $typeName: "warden.v1.InstanceAdopted", asLeftover: false, foundBy: "inventory" } };
    const s = stream([ev(10n, 0n, leader(3n)), ev(10n, 1n, adopted, { incarnation: "i9" }), orphanStop(10n, "a")]);
    expect(disappearanceProblems(gone, s)).toMatchObject({ problems: [], evicted: 1, orphansStopped: 1 });
    const elsewhere = stream([ev(10n, 0n, leader(3n)), ev(10n, 1n, adopted, { incarnation: "i9" }), orphanStop(10n, "b")]);
    expect(disappearanceProblems(gone, elsewhere).problems[0]).toContain("a/i9 (pid 42) was ready and disappeared");
    // Stopped by a term already superseded: flagged as any other stop.
    const stale = stream([ev(10n, 0n, leader(3n)), ev(10n, 1n, adopted, { incarnation: "i9" }), ev(20n, 0n, leader(7n)), orphanStop(10n, "a")]);
    expect(disappearanceProblems(gone, stale).problems[0]).toContain("a/i9: stopped by an eviction.started of coordinator epoch 10, emitted after the newer epoch 20");
  });

  it("longest outage: the longest stretch ending in a success with failures inside it, or running to the end", () => {
    const at = (endedAtMs: number, ok: boolean): { ok: boolean; endedAtMs: number } => ({ ok, endedAtMs });
    expect(longestOutageMs([at(100, true), at(200, true)], 0, 300)).toBe(0);
    expect(longestOutageMs([at(100, true), at(900, false), at(1_500, true), at(1_600, true)], 0, 2_000)).toBe(1_400);
    expect(longestOutageMs([at(100, false), at(300, true), at(400, true), at(500, false)], 0, 2_000)).toBe(1_600);
  });

  it("flags two members of one group alive on one node in one sample, not on two nodes", () => {
    const modelOf = new Map([["x", "g1"], ["y", "g2"], ["z", "g2"]]);
    const groups = new Map([["g1", ["excl"]], ["g2", ["excl"]]]);
    const ok = [{ n: 0, backends: [{ pid: 1, nodeId: "a", incarnation: "x" }, { pid: 2, nodeId: "b", incarnation: "y" }] }];
    expect(exclusivityProblems(ok, modelOf, groups)).toEqual([]);
    const bad = [...ok, { n: 1, backends: [{ pid: 1, nodeId: "a", incarnation: "x" }, { pid: 3, nodeId: "a", incarnation: "z" }] }];
    expect(exclusivityProblems(bad, modelOf, groups)).toEqual(["a group excl: g1/x (pid 1) and g2/z (pid 3) alive together (from sample 1)"]);
  });
});

describe("nemesis plan", () => {
  it("one seed, one plan; every fault kind in every plan", () => {
    for (const seed of [0, 1, 26, 4_294_967_295]) {
      const p = nemesisPlan({ seed, servers: 3, agents: 2 });
      expect(nemesisPlan({ seed, servers: 3, agents: 2 })).toEqual(p);
      expect(p.map((f) => f.kind).sort()).toEqual([...baseFaultKinds].sort());
    }
    expect(nemesisPlan({ seed: 1, servers: 3, agents: 2 })).not.toEqual(nemesisPlan({ seed: 2, servers: 3, agents: 2 }));
    expect(nemesisPlan({ seed: 1, servers: 3, agents: 2, faults: 12 })).toHaveLength(12);
  });
});
