import type { Clock } from "@warden/common";

/** Decides whether a repeated message is logged now. */
export interface RepeatLimiter {
  /**
   * `log: true` when `key` differs from the last logged key or `everyMs` has
   * passed since it was logged; `suppressed` then counts the repeats of that
   * same key not logged in between (0 for a new key).
   */
  admit(key: string): { readonly log: boolean; readonly suppressed: number };
  /** Forgets the last key, so the next message is logged whatever it is. */
  reset(): void;
}

/**
 * Logs a failure on change and at most every `everyMs` while it repeats, so
 * a retry loop says why it fails without a line per attempt.
 */
export function createRepeatLimiter(clock: Clock, everyMs: number): RepeatLimiter {
  let lastKey: string | undefined;
  let lastAtMs = 0;
  let suppressed = 0;
  return {
    admit(key) {
      const now = clock.now();
      if (key !== lastKey || now - lastAtMs >= everyMs) {
        const r = { log: true, suppressed: key === lastKey ? suppressed : 0 };
        lastKey = key;
        lastAtMs = now;
        suppressed = 0;
        return r;
      }
      suppressed++;
      return { log: false, suppressed };
    },
    reset() {
      lastKey = undefined;
      suppressed = 0;
    },
  };
}
