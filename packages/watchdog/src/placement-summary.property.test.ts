/**
 * `placementSummary` reads a node's records once for placement's figures and
 * (asked with a limit) ExplainPlacement's evictions. On random clusters its
 * answer equals the rules as written before, recomputed here the slow way
 * from a snapshot's views: every figure, every conflict and every eviction,
 * in order.
 */
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { ManualClock } from "@warden/common";
import type { InstanceView, OccupancyEntry } from "./instance.js";
import { createWatchdogCore, type NodePlacementSummary, type WatchdogCore } from "./watchdog-core.js";

const nodes = ["n0", "n1", "n2"] as const;
const models = ["a", "b", "c", "p"] as const;
/** Each model's groups, fixed per model (the core keeps one entry per model). */
const groupsOfModel: Record<string, string[]> = { a: ["g"], b: ["g", "h"], c: [], p: ["h"] };

type Op =
  | { readonly t: "ready" | "loading"; readonly node: number; readonly model: number; readonly gib: number }
  | { readonly t: "busy" | "idle" | "use" | "stop" | "remove"; readonly pick: number }
  | { readonly t: "occupancy"; readonly node: number; readonly kind: OccupancyEntry["kind"]; readonly model: number }
  | { readonly t: "pin" | "force"; readonly on: boolean };

const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ t: fc.constantFrom("ready" as const, "loading" as const), node: fc.nat(2), model: fc.nat(3), gib: fc.integer({ min: 1, max: 4 }) }) },
  { weight: 4, arbitrary: fc.record({ t: fc.constantFrom("busy" as const, "idle" as const, "use" as const, "stop" as const, "remove" as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("occupancy" as const), node: fc.nat(2), kind: fc.constantFrom("leftover" as const, "orphan" as const, "unconfirmed" as const), model: fc.nat(3) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constantFrom("pin" as const, "force" as const), on: fc.boolean() }) },
);

const GiB = 1024 ** 3;

/**
 * Every (model, groups) asked, the last one first too: a check right after an earlier one (with
 * the cluster changed between) then repeats the earlier check's last question, so an answer
 * kept from before the change would show.
 */
const combos: [string, string[]][] = ["a", "b", "c", "m"].flatMap((m) => [[], ["g"], ["h"], ["g", "h"]].map((g): [string, string[]] => [m, g]));
const questions: [string, string[]][] = [["m", ["g", "h"]], ...combos];

/** Applies `ops` to a new core; `midway` looks at it after the first half (so an answer computed then must not survive a change after). */
function build(ops: readonly Op[], midway: (core: WatchdogCore) => void): WatchdogCore {
  const clock = new ManualClock(1_000);
  const core = createWatchdogCore({ clock, loader: { hasModelAtAddress: () => true } });
  const incarnations: string[] = [];
  const addresses: string[] = [];
  const occupancy = new Map<string, OccupancyEntry[]>();
  let seq = 0;
  for (const [i, o] of ops.entries()) {
    if (i === Math.floor(ops.length / 2)) midway(core);
    // Instances that become ready together are equally recent: ties keep the node's order.
    if (o.t !== "ready" && o.t !== "loading") clock.advance(7);
    switch (o.t) {
      case "ready":
      case "loading": {
        seq++;
        const model = models[o.model] ?? "a";
        const spec = { nodeId: nodes[o.node] ?? "n0", model, incarnation: `inc-${String(seq)}`, address: `10.0.0.${String(seq)}:5000`, sizeBytes: o.gib * GiB, groups: groupsOfModel[model] ?? [] };
        if (o.t === "ready") core.registerReady(spec);
        else core.registerLoading(spec);
        incarnations.push(spec.incarnation);
        addresses.push(spec.address);
        break;
      }
      case "busy":
      case "idle":
      case "use": {
        const address = addresses[o.pick % Math.max(1, addresses.length)];
        if (address === undefined) break;
        if (o.t === "busy") core.mark(address);
        else if (o.t === "idle") core.unmark(address);
        else core.updateLastUsed(address);
        break;
      }
      case "stop":
      case "remove": {
        const inc = incarnations[o.pick % Math.max(1, incarnations.length)];
        if (inc === undefined || core.instance(inc) === undefined) break;
        if (o.t === "stop") core.selectExplicit(inc, { reason: "admin" });
        else core.remove(inc);
        break;
      }
      case "occupancy": {
        const nodeId = nodes[o.node] ?? "n0";
        const model = models[o.model] ?? "a";
        const list = [...(occupancy.get(nodeId) ?? []), { kind: o.kind, key: `k${String(++seq)}`, model, groups: groupsOfModel[model] ?? [], sizeBytes: GiB }];
        occupancy.set(nodeId, list);
        core.setNodeOccupancy(nodeId, list);
        break;
      }
      case "pin":
        core.updatePolicy({ pinnedModels: o.on ? ["p"] : [] });
        break;
      case "force":
        core.updatePolicy({ forceEvictionWhenBusy: o.on });
        break;
    }
  }
  return core;
}

const sharesGroup = (model: string, groups: readonly string[], other: string | undefined, otherGroups: readonly string[]): boolean => other !== model && otherGroups.some((g) => groups.includes(g));

/** The rules as written before: the summary's figures, then the evictions (conflicts, then least recently used idle ones), from views. */
function slowWay(core: WatchdogCore, nodeId: string, model: string, groups: readonly string[], limit: number): NodePlacementSummary {
  const snap = core.snapshot();
  const onNode: InstanceView[] = snap.instances.filter((v) => v.nodeId === nodeId);
  const entries = snap.nodes.find((n) => n.nodeId === nodeId)?.occupancyEntries ?? [];
  const force = snap.policy.forceEvictionWhenBusy;
  const readyNow = (v: InstanceView): boolean => v.state === "ready" && v.pendingEviction === undefined;
  let evictableBytes = 0;
  let evictableSlots = 0;
  const evictableConflicts: string[] = [];
  const blockingConflicts: string[] = [];
  for (const v of onNode) {
    const ready = readyNow(v);
    const evictable = ready && !v.pinned && (force || v.inFlight === 0);
    if (evictable) {
      evictableBytes += v.sizeBytes;
      evictableSlots++;
    }
    if (groups.length > 0 && sharesGroup(model, groups, v.model, v.groups)) {
      if (evictable) evictableConflicts.push(v.model);
      else blockingConflicts.push(`${v.model} (${v.pendingEviction !== undefined ? "pending eviction" : v.pinned ? "pinned" : ready ? "busy" : v.state})`);
    }
  }
  for (const e of entries) if (groups.length > 0 && sharesGroup(model, groups, e.model, e.groups)) blockingConflicts.push(`${e.kind} ${e.model ?? e.key}`);
  const occupied = onNode.length + entries.length;
  const accountedBytes = onNode.reduce((s, v) => s + v.sizeBytes, 0) + entries.reduce((s, e) => s + e.sizeBytes, 0);
  const evictions = onNode.filter((v) => readyNow(v) && !v.pinned && groups.length > 0 && sharesGroup(model, groups, v.model, v.groups)).map((v) => `${v.model}@${v.incarnation}`);
  const need = limit > 0 ? occupied + 1 - limit - evictions.length : 0;
  const byAge = onNode
    .filter((v) => readyNow(v) && v.model !== model && !v.pinned && !(groups.length > 0 && sharesGroup(model, groups, v.model, v.groups)) && v.inFlight === 0)
    .map((v) => ({ v, lastUsedMs: v.address === undefined ? 0 : (v.lastUsedMs ?? 0) }))
    .sort((x, y) => x.lastUsedMs - y.lastUsedMs);
  for (const { v } of byAge.slice(0, Math.max(0, need))) evictions.push(`${v.model}@${v.incarnation}`);
  return { occupied, accountedBytes, evictableBytes, evictableSlots, evictableConflicts, blockingConflicts, evictions };
}

describe("placementSummary on random clusters", () => {
  it("equals the rules recomputed from views: figures, conflicts and evictions (busy, pinned, pending, loading, leftovers; under, at and over the limit)", () => {
    let evicting = 0;
    let byAge = 0;
    fc.assert(
      fc.property(fc.array(op, { minLength: 1, maxLength: 40 }), (ops) => {
        const check = (core: WatchdogCore): void => {
          for (const [model, groups] of questions)
            for (const nodeId of nodes)
              for (const limit of [0, 1, 2, 3, 5]) {
                const want = slowWay(core, nodeId, model, groups, limit);
                const { evictions, ...figures } = want;
                expect(core.placementSummary(nodeId, model, groups, { limit })).toEqual(want);
                expect(core.placementSummary(nodeId, model, groups)).toEqual(figures);
                if ((evictions?.length ?? 0) > 0) evicting++;
                if ((evictions?.length ?? 0) > 0 && groups.length === 0) byAge++;
              }
        };
        check(build(ops, check));
      }),
      { numRuns: 200 },
    );
    // Not vacuous: many answers evict, and some by age alone (no group to conflict with).
    expect(evicting).toBeGreaterThan(1_000);
    expect(byAge).toBeGreaterThan(100);
  });
});
