/**
 * Reads `signal.aborted` through a call. The compiler narrows a property read
 * before an await as if it could not change across it; an AbortSignal can.
 */
export function isAborted(signal: AbortSignal): boolean {
  return signal.aborted;
}
