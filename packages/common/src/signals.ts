import type { Clock } from "./clock.js";
import { Code, WardenError } from "./errors.js";

export interface DeadlineSignal {
  readonly signal: AbortSignal;
  /** Releases the timer and the parent listener; call when the work is done. */
  cleanup(): void;
}

/**
 * An AbortSignal that aborts with DEADLINE_EXCEEDED after `timeoutMs` on the
 * given clock, or with the parent's reason when the parent aborts first.
 */
export function deadlineSignal(clock: Clock, timeoutMs: number, what: string, parent?: AbortSignal): DeadlineSignal {
  const ctl = new AbortController();
  const cancelTimer = clock.setTimer(timeoutMs, () => {
    ctl.abort(new WardenError(Code.DeadlineExceeded, `${what}: deadline of ${String(timeoutMs)}ms exceeded`));
  });
  const onParent = (): void => {
    ctl.abort(parent?.reason);
  };
  if (parent !== undefined) {
    if (parent.aborted) ctl.abort(parent.reason);
    else parent.addEventListener("abort", onParent, { once: true });
  }
  return {
    signal: ctl.signal,
    cleanup() {
      cancelTimer();
      parent?.removeEventListener("abort", onParent);
    },
  };
}

/** The reason of an aborted signal as a WardenError (CANCELLED when it is not one). */
export function abortReason(signal: { readonly reason: unknown }): WardenError {
  const r: unknown = signal.reason;
  if (r instanceof WardenError) return r;
  return new WardenError(Code.Canceled, r instanceof Error ? r.message : "operation cancelled", { cause: r });
}

/** Throws the signal's reason as a WardenError if it is aborted. */
export function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted === true) throw abortReason(signal);
}

/** Resolves after `ms` on the clock; rejects with the abort reason if `signal` aborts first. */
export function sleep(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted === true) {
      reject(abortReason(signal));
      return;
    }
    const onAbort = (): void => {
      cancel();
      if (signal !== undefined) reject(abortReason(signal));
    };
    const cancel = clock.setTimer(ms, () => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    });
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Settles with `p`, or rejects with the signal's reason (as a WardenError)
 * as soon as it aborts. `p` keeps running; the caller stops waiting for it.
 */
export function raceSignal<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(abortReason(signal));
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => {
      reject(abortReason(signal));
    };
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (err: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(err instanceof Error ? err : WardenError.from(err));
      },
    );
  });
}

/**
 * Races `work` against `signal`: its reason (abortReason) once it aborts,
 * else what `work` settles to. The abort listener is made per call and removed
 * when it settles, so a long-lived signal raced many times keeps nothing of the
 * earlier races (racing against one promise made once would keep a reaction,
 * and each result, per race). On abort the caller stops waiting; the
 * underlying operation may still finish.
 */
export async function raceAbort<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return work;
  throwIfAborted(signal);
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => {
      reject(abortReason(signal));
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
  try {
    return await Promise.race([work, aborted]);
  } finally {
    if (onAbort !== undefined) signal.removeEventListener("abort", onAbort);
  }
}

/**
 * Waits, one at a time, on promise after promise under one long-lived signal
 * (a stream's next message): `race(work)` settles as `work` does, or rejects
 * with the signal's reason (abortReason) once it aborts. One abort listener
 * serves every wait — raceAbort adds and removes one per call, which costs
 * more than the wait on a hot stream — and it reaches only the wait in
 * progress, so nothing of an earlier wait is kept. Call `close()` when done.
 */
export class AbortLatch {
  readonly #signal: AbortSignal | undefined;
  /** The wait in progress: what the listener rejects. */
  #pending: ((reason: WardenError) => void) | undefined;
  readonly #onAbort = (): void => {
    const reject = this.#pending;
    this.#pending = undefined;
    if (reject !== undefined && this.#signal !== undefined) reject(abortReason(this.#signal));
  };

  constructor(signal: AbortSignal | undefined) {
    this.#signal = signal;
    signal?.addEventListener("abort", this.#onAbort, { once: true });
  }

  /** One wait at a time: a second `race` before the first settles would leave the first to its own `work`. */
  race<T>(work: Promise<T>): Promise<T> {
    const signal = this.#signal;
    if (signal === undefined) return work;
    if (signal.aborted) return Promise.reject(abortReason(signal));
    return new Promise<T>((resolve, reject) => {
      this.#pending = reject;
      work.then(
        (v) => {
          if (this.#pending === reject) this.#pending = undefined;
          resolve(v);
        },
        (err: unknown) => {
          if (this.#pending === reject) this.#pending = undefined;
          reject(err instanceof Error ? err : WardenError.from(err));
        },
      );
    });
  }

  close(): void {
    this.#pending = undefined;
    this.#signal?.removeEventListener("abort", this.#onAbort);
  }
}
