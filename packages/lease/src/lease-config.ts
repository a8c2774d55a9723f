import { invalidArgument } from "@warden/common";

/**
 * Timing of the leader lease. All durations are measured on each
 * coordinator's own monotonic clock; nothing compares clocks across machines.
 */
export interface LeaseConfig {
  /** This coordinator's name in the lease key; unique per process incarnation. 1–128 chars. */
  readonly holder: string;
  /** How often the leader rewrites the key. @default 1000, bounds 50–60 000 */
  readonly renewMs: number;
  /** How long a follower waits, after it last saw the key change, before it takes over. @default 3000, bounds 200–600 000 */
  readonly leaseMs: number;
  /**
   * The leader stops acting this long before its own lease ends (measured from
   * when it SENT its last successful write), which absorbs clock-rate drift
   * between machines: a drift rate ρ is safe while ρ < margin / (2·lease − margin),
   * about 9 % with the defaults. @default 500, bounds 1 – (lease − renew − 1)
   */
  readonly marginMs: number;
  /** Pause before the leader retries a renewal whose outcome is unknown. @default 250, bounds 1 – renew */
  readonly retryMs: number;
}

export const defaultLeaseTiming = { renewMs: 1_000, leaseMs: 3_000, marginMs: 500, retryMs: 250 } as const;

export const leaseHolderMaxChars = 128;

function checkMs(field: string, v: number, min: number, max: number): void {
  if (!Number.isInteger(v) || v < min || v > max) {
    throw invalidArgument(field, `must be an integer from ${min} to ${max} ms, got ${String(v)}`);
  }
}

/**
 * A whole, valid config from defaults and overrides, or a WardenError naming
 * the first bad field. The checks make the lease meaningful: a leader gets at
 * least one renewal in before it must step down.
 */
export function leaseConfig(holder: string, overrides: Partial<Omit<LeaseConfig, "holder">> = {}): LeaseConfig {
  if (holder.length === 0 || holder.length > leaseHolderMaxChars) {
    throw invalidArgument("holder", `must be 1 to ${leaseHolderMaxChars} characters`);
  }
  const c: LeaseConfig = { holder, ...defaultLeaseTiming, ...overrides };
  checkMs("renewMs", c.renewMs, 50, 60_000);
  checkMs("leaseMs", c.leaseMs, 200, 600_000);
  checkMs("marginMs", c.marginMs, 1, c.leaseMs - c.renewMs - 1);
  checkMs("retryMs", c.retryMs, 1, c.renewMs);
  return c;
}
