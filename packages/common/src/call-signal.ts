/**
 * What a call's code reads of its cancellation: whether and why it was
 * aborted, and a listener for the moment it is. An AbortSignal is one; so is
 * a {@link CallSignal}, which the lean gRPC server gives each call instead of
 * building an AbortSignal per call.
 */
export interface AbortLike {
  readonly aborted: boolean;
  readonly reason: unknown;
  addEventListener(type: "abort", listener: () => void, options?: { readonly once?: boolean }): void;
  removeEventListener(type: "abort", listener: () => void): void;
}

/** An {@link AbortLike} that can also give an AbortSignal of the same cancellation, for the APIs that take one. */
export interface CallCancel extends AbortLike {
  /** Made on first use (already aborted, with the same reason, when the call already ended). */
  readonly signal: AbortSignal;
}

/**
 * One call's cancellation without an AbortSignal unless something asks for
 * one. Node builds each AbortSignal as an EventTarget whose prototype is then
 * replaced, which leaves it a slow dictionary object: several microseconds per
 * signal, plus an Event per abort. A routed call that is served at once
 * needs only `aborted` and one listener (its call to the backend), so this
 * keeps those in plain fields and makes the AbortSignal on first use of
 * `signal` — a call that waits (a load, the admission queue) gets it then.
 *
 * Abort runs the listeners (once each, in the order added; one that throws
 * is reported as an uncaught exception, as an AbortSignal's is, and the rest
 * still run), then aborts the AbortSignal if one was made. Listeners are
 * meant to be few: they are kept in an array and removal is linear.
 */
export class CallSignal implements CallCancel {
  private isAborted = false;
  private why: unknown;
  private controller: AbortController | undefined;
  private listeners: (() => void)[] | undefined;

  get aborted(): boolean {
    return this.isAborted;
  }

  get reason(): unknown {
    return this.why;
  }

  get signal(): AbortSignal {
    let c = this.controller;
    if (c === undefined) {
      c = new AbortController();
      if (this.isAborted) c.abort(this.why);
      this.controller = c;
    }
    return c.signal;
  }

  /** Aborts with `reason` (the first abort wins; later ones do nothing). */
  abort(reason: unknown): void {
    if (this.isAborted) return;
    this.isAborted = true;
    this.why = reason;
    const ls = this.listeners;
    this.listeners = undefined;
    if (ls !== undefined) {
      for (const l of ls) {
        try {
          l();
        } catch (err) {
          // As an EventTarget does: a listener's throw is reported (uncaught), the other listeners still run.
          queueMicrotask(() => {
            throw err;
          });
        }
      }
    }
    this.controller?.abort(reason);
  }

  /** Runs `listener` once at the abort (never when already aborted, as an AbortSignal's). The `once` option is implied. */
  addEventListener(_type: "abort", listener: () => void): void {
    if (this.isAborted) return;
    if (this.listeners === undefined) this.listeners = [listener];
    else if (!this.listeners.includes(listener)) this.listeners.push(listener);
  }

  removeEventListener(_type: "abort", listener: () => void): void {
    const ls = this.listeners;
    if (ls === undefined) return;
    const i = ls.indexOf(listener);
    if (i >= 0) ls.splice(i, 1);
  }
}
