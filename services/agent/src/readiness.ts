import { connect } from "node:net";
import { Code, WardenError, abortReason, sleep, type Clock } from "@warden/common";
import type { ReadinessConfig } from "./agent-config.js";
import { isAborted } from "./is-aborted.js";

/** Resolves true when host:port accepts a TCP connection within timeoutMs. */
export function tcpProbe(host: string, port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = connect({ host, port });
    const done = (ok: boolean): void => {
      clearTimeout(t);
      sock.destroy();
      resolve(ok);
    };
    const t = setTimeout(() => { done(false); }, timeoutMs);
    sock.once("connect", () => { done(true); });
    sock.once("error", () => { done(false); });
  });
}

export interface WaitReadyOptions {
  clock: Clock;
  readiness: ReadinessConfig;
  /** One Health attempt; resolves when the backend answered OK. */
  health(timeoutMs: number, signal: AbortSignal): Promise<void>;
  /** Cheap pre-check before Health (a TCP connect), so the gRPC channel is not put into reconnect backoff. */
  portOpen(timeoutMs: number): Promise<boolean>;
  signal: AbortSignal;
}

/**
 * Polls until Health answers, within the readiness budget (attempts ×
 * intervalMs, DESIGN §5). Polls run every initialIntervalMs during the first
 * intervalMs, then double up to intervalMs. Throws DEADLINE_EXCEEDED with "readiness" in the message when the
 * budget runs out, or the signal's reason when it aborts (process exit, caller
 * deadline, agent shutdown).
 */
export async function waitReady(options: WaitReadyOptions): Promise<void> {
  const { clock, readiness, signal } = options;
  const budgetMs = readiness.attempts * readiness.intervalMs;
  const startMs = clock.now();
  let waitMs = readiness.initialIntervalMs;
  let lastError = "no answer yet";
  for (;;) {
    if (signal.aborted) throw abortReason(signal);
    const leftMs = budgetMs - (clock.now() - startMs);
    if (leftMs <= 0) break;
    const attemptMs = Math.max(1, Math.min(readiness.intervalMs, leftMs));
    if (await options.portOpen(attemptMs)) {
      try {
        await options.health(attemptMs, signal);
        return;
      } catch (err) {
        // the signal may have fired while Health was in flight
        if (isAborted(signal)) throw abortReason(signal);
        lastError = WardenError.from(err).message;
      }
    } else lastError = "port not open";
    await sleep(clock, Math.min(waitMs, Math.max(0, budgetMs - (clock.now() - startMs))), signal);
    // Poll at the fast initial interval for the first full interval (most backends
    // come up then, and a refused loopback connect costs microseconds), then back
    // off by doubling up to the interval: a doubling from the start overshoots a
    // 500 ms start-up by up to 400 ms.
    if (clock.now() - startMs >= readiness.intervalMs) waitMs = Math.min(readiness.intervalMs, waitMs * 2);
  }
  throw new WardenError(Code.DeadlineExceeded, `readiness: Health did not answer within ${String(budgetMs)}ms (${String(readiness.attempts)} x ${String(readiness.intervalMs)}ms): ${lastError}`);
}
