import { invalidArgument, throwIfAborted } from "@warden/common";
import type { Sleep } from "./watchdog-service.js";

export interface RetryEnforcementOptions {
  /** Attempts in total, ≥ 1. @default 30 (DESIGN §5) */
  readonly maxAttempts?: number;
  /** Pause between attempts that still need more. @default 1000 */
  readonly intervalMs?: number;
  /** The caller's clock-backed sleep. */
  readonly sleep: Sleep;
  readonly signal?: AbortSignal;
}

/**
 * LocalAI's `retryEnforce` (localai-semantics §4.2): runs `attempt` until it
 * no longer needs more, at most `maxAttempts` times, sleeping `intervalMs`
 * between attempts and not after the last. Resolves with the attempt count
 * and the last result.
 *
 * Deliberate difference (W10): `maxAttempts <= 0` is rejected with
 * INVALID_ARGUMENT instead of silently disabling enforcement.
 */
export async function retryEnforcement<R extends { readonly needMore: boolean }>(
  attempt: () => Promise<R>,
  options: RetryEnforcementOptions,
): Promise<{ readonly attempts: number; readonly last: R }> {
  const max = options.maxAttempts ?? 30;
  const intervalMs = options.intervalMs ?? 1_000;
  if (!Number.isInteger(max) || max < 1) throw invalidArgument("maxAttempts", `must be an integer >= 1, got ${String(max)}`);
  if (!Number.isFinite(intervalMs) || intervalMs < 0) throw invalidArgument("intervalMs", `must be a finite duration >= 0 ms, got ${String(intervalMs)}`);
  let attempts = 0;
  for (;;) {
    throwIfAborted(options.signal);
    attempts++;
    const last = await attempt();
    if (!last.needMore || attempts >= max) return { attempts, last };
    await options.sleep(intervalMs, options.signal);
  }
}
