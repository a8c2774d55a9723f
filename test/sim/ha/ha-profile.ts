import type { SimRandom } from "../kernel/sim-random.js";

/**
 * The HA profile (issue 17 in the simulation): two coordinator processes, a
 * leader lease on a compare-and-set key driven by the real `@warden/lease`
 * core, the shared JetStream journal, leader epochs on every command and the
 * agents' fences. Every choice comes from the profile's own forked streams
 * (`<options stream>-ha`, `plan-ha`), drawn after every other draw, so a seed
 * without the profile draws exactly what it drew before: its trace is byte-identical.
 */
export const haFaults = ["leader-crash", "leader-pause", "lease-partition", "leader-agent-partition"] as const;
export type HaFault = (typeof haFaults)[number];

export interface HaOptions {
  /** Lease timing (the core's LeaseConfig, within leaseConfig's bounds). */
  readonly leaseMs: number;
  readonly renewMs: number;
  readonly marginMs: number;
  readonly retryMs: number;
  /** The lease keeper's per-call deadline on the KV. */
  readonly opTimeoutMs: number;
  /**
   * Each process's clock rate error. The core is safe while the drift rate
   * ρ < margin / (2·lease − margin) (lease-config.ts); with margin = lease/6
   * that is 9 %: each clock drifts by at most 2 %, so two drift apart by at most 4 %.
   */
  readonly driftRates: readonly [number, number];
  readonly clockOffsetsMs: readonly [number, number];
  /** HA faults per simulated minute (each of the enabled kinds). */
  readonly perMinute: number;
  readonly faults: readonly HaFault[];
}

export function drawHa(r: SimRandom): HaOptions {
  const leaseMs = r.pick([2_000, 3_000, 5_000]);
  const drift = (): number => (r.next() * 2 - 1) * 0.02;
  const faults = haFaults.filter(() => r.chance(0.75));
  return {
    leaseMs,
    renewMs: Math.round(leaseMs / 3),
    marginMs: Math.round(leaseMs / 6),
    retryMs: 250,
    opTimeoutMs: 1_000,
    driftRates: [drift(), drift()],
    clockOffsetsMs: [r.int(0, 1_000_000), r.int(0, 1_000_000)],
    perMinute: r.pick([1, 2, 3]),
    faults: faults.length > 0 ? faults : [r.pick(haFaults)],
  };
}
