/**
 * The agent's own budget out of `remainingMs` of a caller's deadline: all but a
 * margin of 10 % (at most 1 s), so the agent's answer (a `failed` event, the
 * lock message) reaches the caller before its transport gives up with a bare
 * DEADLINE_EXCEEDED. The cap was 250 ms: on a loaded node a scheduling stall
 * of that size is ordinary, and the caller then lost the typed answer.
 */
export function budgetBeforeCallerDeadlineMs(remainingMs: number): number {
  return Math.max(0, remainingMs - Math.min(1_000, remainingMs * 0.1));
}
