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
// A random start inside the slice, so consecutive files in one worker rarely reuse ports.
let next = Math.floor(Math.random() * (sliceSize / 100)) * 100;

/** `size` consecutive ports reserved for this worker's use. */
export function testPortRange(size = 40): { min: number; max: number } {
  if (size > sliceSize) throw new RangeError(`port range of ${String(size)} exceeds a worker slice of ${String(sliceSize)}`);
  if (next + size > sliceSize) next = 0;
  const min = sliceBase + next;
  next += size;
  return { min, max: min + size - 1 };
}
