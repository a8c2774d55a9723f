import { listeningSocketsInRange } from "../../services/agent/src/proc-fs.js";

/**
 * Backend port ranges for tests. Test files run in parallel (one per vitest
 * worker): each worker gets its own slice of [22000, 32000), below the
 * kernel's ephemeral range (32768+) and clear of `warden up`'s default
 * 21000–21999, so no agent ever sees another test's backend in its range
 * (it would report it as an orphan, and might stop it). Within a worker,
 * ranges are handed out one after another.
 *
 * Two test runs at once on one machine (two checkouts) each set
 * WARDEN_TEST_PORT_BASE / WARDEN_TEST_PORT_SLICE / WARDEN_TEST_PORT_SLICES to
 * disjoint windows, so neither sees the other's backends at all.
 */
const envInt = (name: string, fallback: number): number => {
  const v = Number(process.env[name] ?? "");
  return Number.isInteger(v) && v > 0 ? v : fallback;
};
const first = envInt("WARDEN_TEST_PORT_BASE", 22_000);
const sliceSize = envInt("WARDEN_TEST_PORT_SLICE", 2_000);
const slices = envInt("WARDEN_TEST_PORT_SLICES", 5);
const pool = Number(process.env.VITEST_POOL_ID ?? process.env.VITEST_WORKER_ID ?? "1");
const sliceBase = first + ((Number.isFinite(pool) ? Math.max(0, pool - 1) : 0) % slices) * sliceSize;
// A random start inside the slice (in steps of 10), so consecutive files in one worker rarely reuse ports.
let next = Math.floor(Math.random() * (sliceSize / 10)) * 10;

/** `size` consecutive ports reserved for this worker's use. */
export function testPortRange(size = 40): { min: number; max: number } {
  if (size > sliceSize) throw new RangeError(`port range of ${String(size)} exceeds a worker slice of ${String(sliceSize)}`);
  if (next + size > sliceSize) next = 0;
  const min = sliceBase + next;
  next += size;
  return { min, max: min + size - 1 };
}

/**
 * `size` consecutive ports of this worker's slice on which nothing listens
 * right now (per /proc/net/tcp and tcp6, any address). For tests that count
 * what an agent finds in its range: a backend left behind by an earlier file
 * in the same worker (still exiting) would otherwise be counted as theirs.
 */
export async function quietPortRange(size: number): Promise<{ min: number; max: number }> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const range = testPortRange(size);
    if ((await listeningSocketsInRange(range.min, range.max)).length === 0) return range;
  }
  throw new Error(`no quiet range of ${String(size)} ports in this worker's slice after 50 tries`);
}
