/**
 * Property test over the decision package ("ExplainPlacement agrees
 * with the placement actually taken on 100 random clusters"): random nodes
 * (labels, state, draining, GPU or RAM memory or none, occupied slots with
 * ready / busy / loading / pending-eviction / pinned instances, leftovers and
 * orphans, evictable and blocking group conflicts) and a random model
 * (selector, size, groups; agents' catalogs with or without its backend, or
 * none reported), fed through the coordinator's own PlacementView
 * over a real WatchdogCore. Pure: no processes, no network.
 *
 * - What ExplainPlacement reports (`plan`) is what a load takes (`choose`).
 * - A `place` node is ready, not draining, matches the selector, has no group
 *   conflict, fits memory (`max(reported use, reservations)`) and a slot, and
 *   is the binpack / spread optimum among such nodes.
 * - `evict-then-place` only when nothing fits outright, on a node where
 *   eviction makes room; `no-fit` exactly when no node fits either way.
 * The oracle is computed from the generated cluster, not from the candidates.
 */
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { create } from "@bufbuild/protobuf";
import { NodeResourcesSchema, type NodeResources } from "@warden/proto";
import { createWatchdogCore } from "@warden/watchdog";
import { modelSpec, type Loader, type ModelSpec } from "@warden/loader";
import type { PlacementStrategy } from "@warden/placement";
import { PlacementView } from "./placement-view.js";
import type { PlacementNodes as NodeRegistry } from "./placement-view.js";

const GiB = 1024 ** 3;
const groupNames = ["g1", "g2", "g3"] as const;
const labelValues = { gpu: ["a100", "t4"], zone: ["z1", "z2"] } as const;

type InstanceKind = "ready" | "busy" | "loading" | "pending";
interface GenInstance {
  readonly model: number;
  readonly kind: InstanceKind;
  readonly sizeGiB: number;
}
interface GenEntry {
  /** `unconfirmed`: known only from a restarted coordinator's journal, its node not reported yet — counted exactly like the others. */
  readonly kind: "leftover" | "orphan" | "unconfirmed";
  readonly groups: readonly string[];
  readonly sizeGiB: number;
}
interface GenNode {
  readonly state: "ready" | "unreachable" | "lost";
  readonly draining: boolean;
  readonly labels: Record<string, string>;
  /** undefined: no heartbeat resources yet (memory unknown). */
  readonly memory: { readonly gpus: readonly { totalGiB: number; usedGiB: number }[]; readonly ramTotalGiB: number; readonly ramUsedGiB: number } | undefined;
  readonly instances: readonly GenInstance[];
  readonly entries: readonly GenEntry[];
  /** Catalog backend names the agent registered ([] = an older agent that reports none: any backend). */
  readonly catalog: readonly string[];
}
interface GenModel {
  readonly groups: readonly string[];
  readonly pinned: boolean;
}
interface GenCluster {
  readonly models: readonly GenModel[];
  readonly nodes: readonly GenNode[];
  readonly limit: number;
  readonly forceBusy: boolean;
  readonly strategy: PlacementStrategy;
  readonly target: { readonly sizeGiB: number; readonly selector: Record<string, string>; readonly groups: readonly string[] };
}

const groupsArb = fc.subarray([...groupNames], { maxLength: 2 });
const labelsArb = fc.oneof(
  { weight: 4, arbitrary: fc.record({ gpu: fc.constantFrom(...labelValues.gpu), zone: fc.constantFrom(...labelValues.zone) }) },
  { weight: 1, arbitrary: fc.record({ gpu: fc.constantFrom(...labelValues.gpu), zone: fc.constantFrom(...labelValues.zone) }, { requiredKeys: [] }) },
) as fc.Arbitrary<Record<string, string>>;
const selectorArb = fc.oneof(
  { weight: 3, arbitrary: fc.constant({}) },
  { weight: 3, arbitrary: fc.record({ gpu: fc.constantFrom(...labelValues.gpu) }) },
  { weight: 1, arbitrary: fc.record({ gpu: fc.constantFrom(...labelValues.gpu), zone: fc.constantFrom(...labelValues.zone) }, { requiredKeys: [] }) },
) as fc.Arbitrary<Record<string, string>>;

const clusterArb: fc.Arbitrary<GenCluster> = fc
  .array(fc.record({ groups: groupsArb, pinned: fc.boolean() }), { minLength: 1, maxLength: 5 })
  .chain((models) =>
    fc.record({
      models: fc.constant(models),
      nodes: fc.array(
        fc.record({
          state: fc.constantFrom<GenNode["state"]>("ready", "ready", "ready", "unreachable", "lost"),
          draining: fc.constantFrom(false, false, true),
          labels: labelsArb,
          memory: fc.option(
            fc.record({
              gpus: fc.array(fc.integer({ min: 4, max: 24 }).chain((t) => fc.record({ totalGiB: fc.constant(t), usedGiB: fc.integer({ min: 0, max: Math.floor(t / 2) }) })), { maxLength: 2 }),
              ramTotalGiB: fc.integer({ min: 4, max: 32 }),
              ramUsedGiB: fc.integer({ min: 0, max: 8 }),
            }),
            { freq: 5, nil: undefined },
          ),
          instances: fc.array(
            fc.record({
              model: fc.integer({ min: 0, max: models.length - 1 }),
              kind: fc.constantFrom<InstanceKind>("ready", "ready", "ready", "ready", "busy", "loading", "pending"),
              sizeGiB: fc.integer({ min: 0, max: 8 }),
            }),
            { maxLength: 4 },
          ),
          catalog: fc.constantFrom<readonly string[]>([], ["backend-sim"], ["backend-sim", "other"], ["other"]),
          entries: fc.oneof(
            { weight: 2, arbitrary: fc.constant([]) },
            { weight: 1, arbitrary: fc.array(fc.record({ kind: fc.constantFrom<GenEntry["kind"]>("leftover", "orphan", "unconfirmed"), groups: groupsArb, sizeGiB: fc.integer({ min: 0, max: 8 }) }), { minLength: 1, maxLength: 2 }) },
          ),
        }),
        { minLength: 0, maxLength: 7 },
      ),
      limit: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 5 })),
      forceBusy: fc.boolean(),
      strategy: fc.constantFrom<PlacementStrategy>("binpack", "spread"),
      target: fc.record({
        sizeGiB: fc.integer({ min: 0, max: 16 }),
        selector: selectorArb,
        groups: fc.oneof(fc.constant([]), groupsArb),
      }),
    }),
  );

function nodeId(i: number): string {
  return `node-${String(i)}`;
}

function resourcesOf(m: NonNullable<GenNode["memory"]>): NodeResources {
  return create(NodeResourcesSchema, {
    gpus: m.gpus.map((g, index) => ({ index, name: "fake", totalBytes: BigInt(g.totalGiB * GiB), usedBytes: BigInt(g.usedGiB * GiB) })),
    ramTotalBytes: BigInt(m.ramTotalGiB * GiB),
    ramUsedBytes: BigInt(m.ramUsedGiB * GiB),
  });
}

/** Builds a real WatchdogCore holding the cluster, and a PlacementView over it. */
function build(c: GenCluster): { view: PlacementView; spec: ModelSpec; complete: () => void } {
  const core = createWatchdogCore({ clock: { now: () => 1_000 }, loader: { hasModelAtAddress: () => true }, policy: { limitPerNode: c.limit, forceEvictionWhenBusy: c.forceBusy } });
  const completions: (() => void)[] = [];
  c.nodes.forEach((n, ni) => {
    n.instances.forEach((inst, ii) => {
      const m = c.models[inst.model] ?? { groups: [], pinned: false };
      const s = { nodeId: nodeId(ni), model: `m${String(inst.model)}`, incarnation: `inc-${String(ni)}-${String(ii)}`, address: `10.0.0.${String(ni)}:${String(5000 + ii)}`, groups: m.groups, pinned: m.pinned, sizeBytes: inst.sizeGiB * GiB };
      if (inst.kind === "loading") {
        core.registerLoading(s);
        return;
      }
      core.registerReady(s);
      if (inst.kind === "busy") completions.push(core.trackRequest(s.address));
      if (inst.kind === "pending") {
        const sel = core.selectExplicit(s.incarnation, { reason: "admin" });
        if (sel.t !== "stop") throw new Error(`could not detach ${s.incarnation}: ${sel.t}`);
      }
    });
    core.setNodeOccupancy(
      nodeId(ni),
      n.entries.map((e, k) => ({ kind: e.kind, key: `${e.kind}-${String(k)}`, model: undefined, groups: e.groups, sizeBytes: e.sizeGiB * GiB })),
    );
  });
  const records = c.nodes.map((n, i) => ({ nodeId: nodeId(i), state: n.state, draining: n.draining, labels: n.labels, backends: new Set(n.catalog), resources: n.memory === undefined ? undefined : resourcesOf(n.memory) }));
  const registry = { list: () => records, limitsOf: () => ({}) } as unknown as NodeRegistry;
  const loader = { core, getPolicy: () => core.getPolicy(), leftoverList: () => [], startingElsewhere: () => [].values(), journalReplicas: { ofModel: () => [].values(), nodeReported: () => [] } } as unknown as Loader;
  const view = new PlacementView(registry, c.strategy);
  view.attach(loader);
  const spec = modelSpec({ id: "target", backend: "backend-sim", sizeBytes: c.target.sizeGiB * GiB, selector: c.target.selector, groups: c.target.groups });
  return {
    view,
    spec,
    complete: () => {
      for (const done of completions) done();
    },
  };
}

interface Truth {
  readonly nodeId: string;
  readonly eligible: boolean;
  readonly ready: boolean;
  readonly draining: boolean;
  readonly selectorMatches: boolean;
  readonly hasBackend: boolean;
  readonly blocking: number;
  readonly evictableConflicts: number;
  readonly memFits: boolean;
  readonly slotFits: boolean;
  readonly fitsNow: boolean;
  readonly fitsAfterEviction: boolean;
  /** Free bytes left after placing (binpack minimises, spread maximises); unknown memory counts as huge. */
  readonly after: number;
}

/** The oracle: DESIGN §3.5 evaluated straight from the generated cluster. */
function truth(c: GenCluster): Truth[] {
  const shares = (groups: readonly string[]): boolean => groups.some((g) => c.target.groups.includes(g));
  return c.nodes.map((n, i): Truth => {
    const selectorMatches = Object.entries(c.target.selector).every(([k, v]) => n.labels[k] === v);
    const ready = n.state === "ready";
    const hasBackend = n.catalog.length === 0 || n.catalog.includes("backend-sim");
    const matches = ready && !n.draining && selectorMatches && hasBackend;
    let total = 0;
    let used = 0;
    if (n.memory !== undefined) {
      if (n.memory.gpus.length > 0) {
        for (const g of n.memory.gpus) {
          total += g.totalGiB * GiB;
          used += g.usedGiB * GiB;
        }
      } else {
        total = n.memory.ramTotalGiB * GiB;
        used = n.memory.ramUsedGiB * GiB;
      }
    }
    let reserved = 0;
    let blocking = 0;
    let evictableConflicts = 0;
    let evBytes = 0;
    let evSlots = 0;
    for (const inst of n.instances) {
      const m = c.models[inst.model] ?? { groups: [], pinned: false };
      reserved += inst.sizeGiB * GiB;
      const evictable = !m.pinned && (inst.kind === "ready" || (inst.kind === "busy" && c.forceBusy));
      if (evictable) {
        evBytes += inst.sizeGiB * GiB;
        evSlots++;
      }
      if (shares(m.groups)) {
        if (evictable) evictableConflicts++;
        else blocking++;
      }
    }
    for (const e of n.entries) {
      reserved += e.sizeGiB * GiB;
      if (shares(e.groups)) blocking++;
    }
    const occupied = n.instances.length + n.entries.length;
    const free = total > 0 ? Math.max(0, total - Math.max(used, reserved)) : Number.POSITIVE_INFINITY;
    const size = c.target.sizeGiB * GiB;
    // A model larger than the node's memory is never placed there (whatever is evicted).
    const eligible = matches && (total <= 0 || size <= total);
    const memFits = size <= free;
    const slotFits = c.limit === 0 || occupied + 1 <= c.limit;
    const fitsNow = eligible && blocking === 0 && evictableConflicts === 0 && memFits && slotFits;
    const fitsAfterEviction = eligible && blocking === 0 && size <= free + evBytes && (c.limit === 0 || occupied + 1 - evSlots <= c.limit);
    return { nodeId: nodeId(i), eligible, ready, draining: n.draining, selectorMatches, hasBackend, blocking, evictableConflicts, memFits, slotFits, fitsNow, fitsAfterEviction, after: Number.isFinite(free) ? free - size : Number.MAX_SAFE_INTEGER / 2 };
  });
}

describe("PlacementView: ExplainPlacement agrees with the placement a load takes (property)", () => {
  it("on random clusters, plan and choose agree and every decision satisfies DESIGN §3.5", () => {
    const seen = { place: 0, "evict-then-place": 0, "no-fit": 0, chosenOnNoFit: 0 };
    fc.assert(
      fc.property(clusterArb, (c) => {
        const { view, spec, complete } = build(c);
        try {
          const plan = view.plan(spec);
          const choice = view.choose(spec);
          const t = truth(c);
          seen[plan.t]++;
          if (plan.t === "no-fit" && choice.nodeId !== undefined) seen.chosenOnNoFit++;
          const byId = new Map(t.map((x) => [x.nodeId, x]));
          // A verdict (reason) for every node, once.
          expect(plan.verdicts.map((v) => v.nodeId).sort()).toEqual(t.map((x) => x.nodeId).sort());
          if (plan.t !== "no-fit") {
            // The node ExplainPlacement reports is the node a load chooses.
            expect(choice.nodeId).toBe(plan.nodeId);
          } else if (choice.nodeId !== undefined) {
            // No-fit: the load still targets the first eligible node so admission reports the shortfall.
            expect(choice.nodeId).toBe(t.find((x) => x.eligible)?.nodeId);
          } else {
            expect(t.some((x) => x.eligible)).toBe(false);
          }
          switch (plan.t) {
            case "place": {
              const n = byId.get(plan.nodeId);
              expect(n).toBeDefined();
              expect(n).toMatchObject({ ready: true, draining: false, selectorMatches: true, hasBackend: true, blocking: 0, evictableConflicts: 0, memFits: true, slotFits: true });
              // binpack: least memory left after placing; spread: most (ties: smallest node id).
              const fitting = t.filter((x) => x.fitsNow);
              const bestAfter = c.strategy === "binpack" ? Math.min(...fitting.map((x) => x.after)) : Math.max(...fitting.map((x) => x.after));
              expect(n?.after).toBe(bestAfter);
              expect(plan.nodeId).toBe(fitting.filter((x) => x.after === bestAfter).map((x) => x.nodeId).sort()[0]);
              break;
            }
            case "evict-then-place": {
              expect(t.some((x) => x.fitsNow)).toBe(false);
              const n = byId.get(plan.nodeId);
              expect(n).toMatchObject({ ready: true, draining: false, selectorMatches: true, hasBackend: true, blocking: 0, fitsAfterEviction: true });
              break;
            }
            case "no-fit":
              expect(t.some((x) => x.fitsNow)).toBe(false);
              expect(t.some((x) => x.fitsAfterEviction)).toBe(false);
              break;
          }
          // The converse: when some node fits, the plan is never no-fit.
          if (t.some((x) => x.fitsNow)) expect(plan.t).toBe("place");
          else if (t.some((x) => x.fitsAfterEviction)) expect(plan.t).toBe("evict-then-place");
        } finally {
          complete();
        }
      }),
      { numRuns: 500 },
    );
    // The generator reaches every outcome (the properties are not vacuous).
    expect(seen.place).toBeGreaterThan(0);
    expect(seen["evict-then-place"]).toBeGreaterThan(0);
    expect(seen["no-fit"]).toBeGreaterThan(0);
    expect(seen.chosenOnNoFit).toBeGreaterThan(0);
  });
});
