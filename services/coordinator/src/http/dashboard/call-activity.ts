import type { CallChange } from "@warden/loader";

export type CallListener = (c: CallChange) => void;
/** Completion tokens a call returned, told once it has them (the OpenAI routes). */
export type TokenListener = (model: string, tokens: number) => void;

/**
 * Routed calls as they begin and end (the loader's `onCall`), fanned out to
 * whoever listens in process: the dashboard's feed (busy state pushed) and
 * its metrics ring (call rates, latency). O(listeners) per change, no
 * allocation; a listener that throws is isolated from the call path.
 */
export class CallActivity {
  private readonly listeners = new Set<CallListener>();
  private readonly tokenListeners = new Set<TokenListener>();

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

  /** A call's completion tokens (the metrics ring's tokens per second); a listener's bug never fails the call. */
  readonly onTokens = (model: string, tokens: number): void => {
    for (const l of this.tokenListeners) {
      try {
        l(model, tokens);
      } catch {
        // As in onCall: the plot loses these tokens, the call is unharmed.
      }
    }
  };

  /** Adds a token listener; returns its removal. */
  listenTokens(l: TokenListener): () => void {
    this.tokenListeners.add(l);
    return () => {
      this.tokenListeners.delete(l);
    };
  }

  /** Adds `l`; returns its removal. */
  listen(l: CallListener): () => void {
    this.listeners.add(l);
    return () => {
      this.listeners.delete(l);
    };
  }
}
