/**
 * The agent's own budget out of `remainingMs` of a caller's deadline: all but a
 * margin of 10 % (at most 250 ms), so the agent's answer (a `failed` event, the
 * lock message) reaches the caller before its transport gives up with a bare
 * DEADLINE_EXCEEDED.
 */
export function budgetBeforeCallerDeadlineMs(remainingMs: number): number {
  return Math.max(0, remainingMs - Math.min(250, remainingMs * 0.1));
}
