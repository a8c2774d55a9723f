import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { countedOffDraining, drainCluster, onNode, readyNodes, startDrain } from "./drain-test-kit.js";
import { readyReplicas } from "./replica-test-kit.js";

interface Case {
  readonly nodeCount: number;
  readonly perNode: number;
  readonly min: number;
  readonly extraMax: number;
  /** Replicas running before the drain, beyond min (up to max). */
  readonly extraRunning: number;
  /** Which of the replica-holding nodes is drained (mod their count). */
  readonly pick: number;
  /** Nodes other than the drained one placement sees as having no room. */
  readonly full: readonly boolean[];
  readonly force: boolean;
}

const caseArb: fc.Arbitrary<Case> = fc.record({
  nodeCount: fc.integer({ min: 2, max: 5 }),
  perNode: fc.integer({ min: 1, max: 2 }),
  min: fc.integer({ min: 1, max: 3 }),
  extraMax: fc.integer({ min: 0, max: 1 }),
  extraRunning: fc.integer({ min: 0, max: 1 }),
  pick: fc.nat(4),
  full: fc.array(fc.boolean(), { minLength: 5, maxLength: 5 }),
  force: fc.boolean(),
});

/** Runs one drain; returns what went wrong (empty when every property held). */
async function runCase(k: Case): Promise<string[]> {
  const max = k.min + k.extraMax;
  const running = Math.min(max, k.min + k.extraRunning);
  if (running > k.nodeCount * k.perNode) return []; // cannot even start: nothing to drain
  const c = drainCluster({ min: running, max }, k.nodeCount, k.perNode);
  const { h } = c;
  h.loader.startTicking();
  await h.until(() => readyReplicas(h).length === running);
  if (running > k.min) h.loader.scale("m1", { min: k.min }, "prop");
  const holders = [...new Set(readyNodes(h))];
  const target = holders[k.pick % holders.length] ?? "n1";
  c.nodes.forEach((id, i) => {
    if (id !== target && k.full[i] === true) c.full.add(id);
  });
  // Room: free slots off the drained node, on nodes with room, for every replica the floor needs there.
  const onTarget = readyNodes(h).filter((n) => n === target).length;
  const needed = Math.max(0, k.min - (running - onTarget));
  let slots = 0;
  for (const id of c.nodes) if (id !== target && !c.full.has(id)) slots += k.perNode - readyNodes(h).filter((n) => n === id).length;
  const room = slots >= needed;
  const d = startDrain(c, target, k.force);
  await h.until(() => d.done());
  const out: string[] = [];
  if (onNode(h, target).length > 0) out.push(`${target} not empty: ${onNode(h, target).join(",")}`);
  if (c.seen.maxCountedOffDraining > max) out.push(`${String(c.seen.maxCountedOffDraining)} replicas off the draining node > max ${String(max)}`);
  if (countedOffDraining(h, c.draining) > max) out.push("above max after the drain");
  const fellBack = h.warnings.some((w) => w.startsWith("drain: no room"));
  if (room && c.seen.minReadyAtDrainStop < k.min) out.push(`ready ${String(c.seen.minReadyAtDrainStop)} < min ${String(k.min)} at a drain stop, room for ${String(needed)}`);
  if (room && fellBack) out.push("fell back although room existed");
  if (!room && !fellBack) out.push("no room, yet no fallback logged");
  if (room && readyReplicas(h).length < k.min) out.push(`ended with ${String(readyReplicas(h).length)} ready < min`);
  h.loader.close();
  return out;
}

describe("drain properties (fast-check)", () => {
  it("where room exists a drain never takes a model below min; never above max off the draining node; the node ends empty; no room is logged", async () => {
    await fc.assert(
      fc.asyncProperty(caseArb, async (k) => {
        expect(await runCase(k)).toEqual([]);
      }),
      { numRuns: 60, seed: 1616 },
    );
  });
});
