import type { Rng } from "./rng.js";

/** Exponential backoff with a cap and symmetric jitter. */
export interface BackoffPolicy {
  /** @default 1000 (DESIGN §5 leftover retry) */
  initialMs: number;
  /** @default 1.6 */
  factor: number;
  /** @default 60000 */
  maxMs: number;
  /** Fraction of the delay added or removed at random. @default 0.2 */
  jitter: number;
}

export const leftoverBackoff: BackoffPolicy = { initialMs: 1_000, factor: 1.6, maxMs: 60_000, jitter: 0.2 };

/** Delay before retry number `attempt` (0-based). Never negative, never above maxMs × (1 + jitter). */
export function backoffDelayMs(policy: BackoffPolicy, attempt: number, rng: Rng): number {
  const base = Math.min(policy.maxMs, policy.initialMs * Math.pow(policy.factor, Math.max(0, attempt)));
  const spread = base * policy.jitter * (rng.next() * 2 - 1);
  return Math.max(0, Math.round(base + spread));
}
