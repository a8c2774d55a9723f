/**
 * The prefix-affinity index's work per routed call (match on the chosen
 * replica, then record), in process: 4 replicas at the production bounds
 * (32 768 entries each), 1 000-character prompts of 15 blocks. Two
 * workloads: unrelated prompts (every block new, each call evicts 15 entries
 * once its replica is full) and prompts sharing their 15 blocks (every block
 * touched again). Baseline in the same run: the index as it was, ordered by
 * Maps, whose oldest entry (a Map's first) was found by walking the slots of
 * every entry deleted since the Map's last rehash.
 */
import { PrefixIndex, prefixBlockHashes } from "@warden/routing-affinity";
import { MapOrderedPrefixIndex } from "./prefix-index-map-ordered.js";
import { median, type BenchResult } from "./bench-result.js";

const bounds = { maxEntries: 262_144, maxEntriesPerReplica: 32_768, ttlMs: 600_000 };
const calls = 10_000;

interface Index {
  record(replica: string, hashes: readonly number[], nowMs: number): void;
  matchLength(replica: string, hashes: readonly number[], nowMs: number): number;
}

/** µs per call over `prompts`, after the index was filled by a first pass. */
function perCallUs(index: Index, prompts: readonly number[][]): number {
  let t = 0;
  const pass = (): number => {
    const start = performance.now();
    for (const h of prompts) {
      const replica = `r${String(t % 4)}`;
      index.matchLength(replica, h, t);
      index.record(replica, h, t++);
    }
    return ((performance.now() - start) / prompts.length) * 1000;
  };
  pass();
  return pass();
}

export function run(): Promise<BenchResult[]> {
  // 10 000 calls × 15 blocks overfill the 4 × 32 768 entries: the measured second pass evicts on every call.
  const unrelated = Array.from({ length: calls }, (_, i) => prefixBlockHashes(`${String(i)} `.padEnd(1_000, "u"), 64, 1_024));
  const shared = Array.from({ length: calls }, (_, i) => prefixBlockHashes(`${"s".repeat(960)}${String(i).padStart(40, "q")}`, 64, 1_024));
  const ours = { unrelated: [] as number[], shared: [] as number[] };
  const base = { unrelated: [] as number[], shared: [] as number[] };
  for (let round = 0; round < 3; round++) {
    ours.unrelated.push(perCallUs(new PrefixIndex(bounds), unrelated));
    base.unrelated.push(perCallUs(new MapOrderedPrefixIndex(bounds), unrelated));
    ours.shared.push(perCallUs(new PrefixIndex(bounds), shared));
    base.shared.push(perCallUs(new MapOrderedPrefixIndex(bounds), shared));
  }
  return Promise.resolve([
    { name: "prefix index per call, unrelated 1 000-char prompts, 4 full replicas (15 evictions a call), median of 3", baseline: "Map-ordered index (before)", ours: median(ours.unrelated), baselineValue: median(base.unrelated), unit: "µs", higherIsBetter: false },
    { name: "prefix index per call, prompts sharing their 15 blocks, median of 3", baseline: "Map-ordered index (before)", ours: median(ours.shared), baselineValue: median(base.shared), unit: "µs", higherIsBetter: false },
  ]);
}
