/** Load-failure cooldown settings (DESIGN §5: 10 s doubling to 5 min). */
export interface CooldownPolicy {
  /** 0 disables the cooldown. @default 10000 */
  readonly baseMs: number;
  /** @default 300000 */
  readonly maxMs: number;
}

export const defaultCooldownPolicy: CooldownPolicy = { baseMs: 10_000, maxMs: 300_000 };

interface FailureState {
  count: number;
  untilMs: number;
}

/**
 * Per-model load-failure cooldown (localai-semantics §4.4): each consecutive
 * failure doubles the wait up to the cap; only a successful load clears the
 * count, so a failure after an expired cooldown doubles again. Bounded: at
 * most one entry per configured model (the loader only records failures of
 * configured models).
 */
export class LoadCooldown {
  private readonly failures = new Map<string, FailureState>();

  constructor(private policy: CooldownPolicy = defaultCooldownPolicy) {}

  setPolicy(policy: CooldownPolicy): void {
    this.policy = { baseMs: Math.max(0, policy.baseMs), maxMs: Math.max(policy.baseMs, policy.maxMs) };
  }

  /** Records a failed load at `nowMs`; returns the cooldown in ms (0 when disabled). */
  recordFailure(model: string, nowMs: number): number {
    if (this.policy.baseMs <= 0) return 0;
    const s = this.failures.get(model) ?? { count: 0, untilMs: 0 };
    s.count++;
    const backoff = Math.min(this.policy.maxMs, this.policy.baseMs * Math.pow(2, Math.min(s.count - 1, 20)));
    s.untilMs = nowMs + backoff;
    this.failures.set(model, s);
    return backoff;
  }

  /** Clears the failure state after a successful load. */
  recordSuccess(model: string): void {
    this.failures.delete(model);
  }

  /** Remaining cooldown in ms, or 0 when a load may proceed. */
  retryAfterMs(model: string, nowMs: number): number {
    const s = this.failures.get(model);
    return s === undefined ? 0 : Math.max(0, s.untilMs - nowMs);
  }

  /** Forgets a model removed from the config. */
  forget(model: string): void {
    this.failures.delete(model);
  }
}
