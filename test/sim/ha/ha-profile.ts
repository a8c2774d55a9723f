import type { SimRandom } from "../kernel/sim-random.js";

/**
 * The HA profile (in the simulation): two coordinator processes, a
 * leader lease on a compare-and-set key driven by the real `@warden/lease`
 * core, the shared JetStream journal, leader epochs on every command and the
 * agents' fences. Every choice comes from the profile's own forked streams
 * (`<options stream>-ha`, `plan-ha`), drawn after every other draw, so a seed
 * without the profile draws exactly what it drew before: its trace is byte-identical.
 */
export const haFaults = ["leader-crash", "leader-pause", "lease-partition", "leader-agent-partition"] as const;
/**
 * The faults above, drawn per seed, and the world's own events (drawn from
 * their own stream, `drawHaWorld`): a leader change of the lease bucket's
 * stream (a nats-server lost).
 */
export type HaFault = (typeof haFaults)[number] | "stream-leader-change";

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
  /** What the world does that bit in reality (drawn from `<options stream>-ha-world`; absent: the defaults). */
  readonly world?: HaWorld;
}

/**
 * The HA world as it behaves in reality (each part was missing from the
 * model before, and each hid a defect):
 * - agents find a new leader only after up to `followMaxMs` (drawn per agent
 *   per takeover): until then their messages go to the old address and are lost;
 * - a resumed process's queued timers run before its lease keeper notices the
 *   pause (`keeperLagMaxMs`: the keeper's own tick and KV round trip);
 * - the lease bucket's stream changes leader (`streamLeaderChangesPerMinute`):
 *   no lease operation is answered for a while, then for a moment two
 *   compare-and-set writes based on the same revision may both be accepted
 *   (consecutive revisions; nats-server 2.9 behaviour);
 * - the backends implement Free(), which unloads the model for real; the
 *   stop sequence's Free goes through the node's agent (FreeBackend, judged by
 *   its leader-epoch fence) to the incarnation it names (`freeReachesBackend`;
 *   off: the agent answers `unsupported` after 5 ms, no message drawn);
 * - the journal recovers from a refused append by sending it again against
 *   the stream's real last record (`journalResends`);
 * - a leader change may lose the lease key's last acknowledged writes, so the
 *   key goes back to an older revision (`leaderChangeLosesWrites`).
 * Each can be switched off (`SimOptions.haWorld`, `--ha-world JSON`) to see
 * which one a violation needs; all off is the world as modelled before.
 */
export interface HaWorld {
  readonly followMaxMs: number;
  readonly keeperLagMaxMs: number;
  readonly streamLeaderChangesPerMinute: number;
  readonly freeReachesBackend: boolean;
  readonly journalResends: boolean;
  /**
   * A StartBackend stream's messages arrive in order, none after a lost one (one HTTP/2 stream
   * over TCP), instead of each with its own delay and loss: the stream's end no longer overtakes
   * its Spawned or Ready (a load "ended without ready" whose process ran on, counted nowhere).
   * Absent: on. In the HA world only, so the recorded single-coordinator traces stay byte-identical.
   */
  readonly orderedStartStreams?: boolean;
  /** A lease-stream leader change may lose the key's last acknowledged writes (`SimLeaseStore.leaderChange`). Absent: on. */
  readonly leaderChangeLosesWrites?: boolean;
}

export const defaultHaWorld: HaWorld = { followMaxMs: 12_000, keeperLagMaxMs: 300, streamLeaderChangesPerMinute: 1, freeReachesBackend: true, journalResends: true };

export function drawHaWorld(r: SimRandom): HaWorld {
  return { followMaxMs: r.pick([3_000, 8_000, 12_000]), keeperLagMaxMs: r.pick([50, 300, 1_000]), streamLeaderChangesPerMinute: r.pick([0, 0.5, 1, 2]), freeReachesBackend: true, journalResends: true };
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
