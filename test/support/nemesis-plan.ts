/**
 * The nemesis test's fault plan, pure: a seed decides every fault's kind,
 * target choice, hold time and the gap before the next one. The run's timing
 * varies; what it decides does not. Every kind appears in every plan (the
 * base list is shuffled, not sampled), so any seed covers each fault.
 */

/** mulberry32: tiny, seedable, good enough to pick faults (not for anything secret). */
export function seededRng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export type Fault =
  /** kill -9 of the member that leads; after `holdMs` it is started again (it joins as a standby). */
  | { readonly kind: "leader-kill"; readonly holdMs: number; readonly gapMs: number }
  /** SIGSTOP of the member that leads for `holdMs`, then SIGCONT (shorter or longer than the lease). */
  | { readonly kind: "leader-pause"; readonly holdMs: number; readonly gapMs: number }
  /** kill -9 of the nats-server leading the lease bucket's stream (KV_warden-leader); restarted after `holdMs`. */
  | { readonly kind: "nats-kill-lease-leader"; readonly holdMs: number; readonly gapMs: number }
  /** kill -9 of nats-server `server` (0..2); restarted after `holdMs`. */
  | { readonly kind: "nats-kill"; readonly server: number; readonly holdMs: number; readonly gapMs: number }
  /** SIGSTOP of agent `agent` (index into the agents) for `holdMs`, then SIGCONT. */
  | { readonly kind: "agent-pause"; readonly agent: number; readonly holdMs: number; readonly gapMs: number }
  /**
   * kill -9 of agent `agent`; after `holdMs` the test starts it again on the same
   * config and state dir, as an operator's supervisor would. Its backends keep
   * running (they are not its process group's); the new agent adopts them.
   */
  | { readonly kind: "agent-kill"; readonly agent: number; readonly holdMs: number; readonly gapMs: number };

export type FaultKind = Fault["kind"];

/** One of each, leader faults and agent pauses twice: the base list every plan shuffles. */
export const baseFaultKinds: readonly FaultKind[] = ["leader-kill", "leader-kill", "leader-pause", "leader-pause", "nats-kill-lease-leader", "nats-kill", "agent-pause", "agent-pause", "agent-kill"];

export interface PlanOptions {
  readonly seed: number;
  /** At least the base list's length; faults beyond it are drawn at random. @default the base list's length */
  readonly faults?: number;
  readonly servers: number;
  readonly agents: number;
}

function between(rng: () => number, lo: number, hi: number): number {
  return Math.round(lo + rng() * (hi - lo));
}

/** The seed's faults, in order. */
export function nemesisPlan(o: PlanOptions): Fault[] {
  const rng = seededRng(o.seed);
  const kinds = [...baseFaultKinds];
  const count = Math.max(o.faults ?? kinds.length, kinds.length);
  while (kinds.length < count) kinds.push(baseFaultKinds[Math.floor(rng() * baseFaultKinds.length)]!);
  // Fisher–Yates with the seeded source.
  for (let i = kinds.length - 1; i > 0; i--) {
    const j = Math.floor(rng() * (i + 1));
    [kinds[i], kinds[j]] = [kinds[j]!, kinds[i]!];
  }
  return kinds.map((kind): Fault => {
    const gapMs = between(rng, 1_000, 3_000);
    switch (kind) {
      case "leader-kill":
        return { kind, holdMs: between(rng, 1_000, 4_000), gapMs };
      case "leader-pause":
        // Around the 3 s lease: a short pause the leader survives, a long one it must not act after.
        return { kind, holdMs: between(rng, 1_500, 9_000), gapMs };
      case "nats-kill-lease-leader":
        return { kind, holdMs: between(rng, 2_000, 6_000), gapMs };
      case "nats-kill":
        return { kind, server: Math.floor(rng() * o.servers), holdMs: between(rng, 2_000, 6_000), gapMs };
      case "agent-pause":
        return { kind, agent: Math.floor(rng() * o.agents), holdMs: between(rng, 1_500, 5_000), gapMs };
      case "agent-kill":
        // With the new agent's own start (seconds on a loaded machine), the node is silent for about as long as the test's node grace (5 s): sometimes less, sometimes more.
        return { kind, agent: Math.floor(rng() * o.agents), holdMs: between(rng, 500, 3_000), gapMs };
    }
  });
}

/** The seed: WARDEN_NEMESIS_SEED when set (a failing run's printed seed replays its decisions), else `fallback`. */
export function nemesisSeed(env: NodeJS.ProcessEnv, fallback: number): number {
  const raw = env["WARDEN_NEMESIS_SEED"];
  if (raw === undefined || raw === "") return fallback;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`WARDEN_NEMESIS_SEED must be a non-negative integer, got ${raw}`);
  return n;
}
