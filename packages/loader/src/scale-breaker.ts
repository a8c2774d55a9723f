/**
 * The replica circuit breaker: when a replica load the reconciler
 * or a scale-up started cannot be placed or fails, further replica loads of
 * that model wait `retryAfterMs`, which doubles per consecutive failure from
 * `initialMs` up to `maxMs` (10 s, 20 s, 40 s … capped at 5 min). A
 * successful replica load closes it. Pure: the caller passes the time.
 */
export interface BreakerPolicy {
  readonly initialMs: number;
  readonly factor: number;
  readonly maxMs: number;
}

export const defaultBreakerPolicy: BreakerPolicy = Object.freeze({ initialMs: 10_000, factor: 2, maxMs: 300_000 });

export interface BreakerState {
  readonly error: string;
  readonly failures: number;
  /** Monotonic time (the injected clock) before which no replica load of the model starts. */
  readonly retryAtMs: number;
}

/** Breakers of every model, by model id. Bounded by the model table: a model removed from the config is forgotten. */
export class ScaleBreakers {
  private readonly open = new Map<string, BreakerState>();
  /** Models whose breaker changed since `takeChanged` (bounded by the model table). */
  private readonly changed = new Set<string>();

  constructor(private readonly policy: BreakerPolicy = defaultBreakerPolicy) {}

  state(model: string): BreakerState | undefined {
    return this.open.get(model);
  }

  /** True when a replica load of `model` may start at `nowMs`. */
  allows(model: string, nowMs: number): boolean {
    const b = this.open.get(model);
    return b === undefined || nowMs >= b.retryAtMs;
  }

  /** Records a failure; returns the new state and the wait it imposes. */
  fail(model: string, error: string, nowMs: number): BreakerState & { readonly retryAfterMs: number } {
    const failures = (this.open.get(model)?.failures ?? 0) + 1;
    const retryAfterMs = Math.min(this.policy.maxMs, this.policy.initialMs * this.policy.factor ** (failures - 1));
    const next = { error, failures, retryAtMs: nowMs + retryAfterMs };
    this.open.set(model, next);
    this.changed.add(model);
    return { ...next, retryAfterMs };
  }

  close(model: string): void {
    if (this.open.delete(model)) this.changed.add(model);
  }

  /** Models added, removed or changed here since the last call (the replica reconciler's dirty set). */
  takeChanged(): string[] {
    if (this.changed.size === 0) return [];
    const out = [...this.changed];
    this.changed.clear();
    return out;
  }
}
