import type { CallChange } from "@warden/loader";

export type CallListener = (c: CallChange) => void;

/**
 * Routed calls as they begin and end (the loader's `onCall`), fanned out to
 * whoever listens in process: the dashboard's feed (busy state pushed) and
 * its metrics ring (call rates, latency). O(listeners) per change, no
 * allocation; a listener that throws is isolated from the call path.
 */
export class CallActivity {
  private readonly listeners = new Set<CallListener>();

  /** The loader's `onCall`. */
  readonly onCall = (c: CallChange): void => {
    for (const l of this.listeners) {
      try {
        l(c);
      } catch {
        // A listener's bug must never fail a call: it loses this change, the next snapshot repairs it.
      }
    }
  };

  /** Adds `l`; returns its removal. */
  listen(l: CallListener): () => void {
    this.listeners.add(l);
    return () => {
      this.listeners.delete(l);
    };
  }
}
