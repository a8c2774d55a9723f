import { invalidArgument, type Clock } from "@warden/common";
import type { Journal } from "./journal-port.js";
import type { StopIntent } from "./journal-record.js";
import type { Outbox } from "./outbox-types.js";
import type { StopIntentIndex } from "./stop-intent-index.js";

/** What the outbox's stop-intent methods share with it: the open intents, the journal, its state check and its durable write. */
export interface StopIntentDeps {
  readonly intents: StopIntentIndex;
  readonly journal: Journal;
  readonly clock: Clock;
  readonly requireState: (want: "running", what: string) => void;
  /** Writes through the journal; a failure marks the outbox not serving and rejects UNAVAILABLE. */
  readonly durable: (what: string, write: () => Promise<void>) => Promise<void>;
}

/** The outbox's stop intents (journaled, so a restarted coordinator still knows what it was stopping). */
export function stopIntentMethods(d: StopIntentDeps): Pick<Outbox, "recordStopIntent" | "clearStopIntent" | "openStopIntents" | "hasStopIntent" | "openStopIntentsOn"> {
  const { intents, journal, clock, requireState, durable } = d;
  return {
    async recordStopIntent(init, signal) {
      requireState("running", "recordStopIntent");
      if (init.incarnation === "") throw invalidArgument("incarnation", "must not be empty");
      const intent: StopIntent = { ...init, recordedAtMs: init.recordedAtMs ?? Math.floor(clock.wallNow()) };
      // Known from the moment it is issued: replay follows issue order, so a
      // clear issued before this record is fsync'd lands after it and must
      // clear it (a clear that found nothing left the intent open for an
      // instance no longer tracked — simulation seed 3826). Undone on failure.
      const previous = intents.get(intent.incarnation);
      intents.set(intent.incarnation, intent);
      try {
        await durable("stop intent", () => journal.append({ kind: "stop-intent", ...intent }, signal));
      } catch (err) {
        if (intents.get(intent.incarnation) === intent) {
          if (previous === undefined) intents.delete(intent.incarnation);
          else intents.set(intent.incarnation, previous);
        }
        throw err;
      }
    },

    async clearStopIntent(incarnation, signal) {
      requireState("running", "clearStopIntent");
      const cleared = intents.get(incarnation);
      if (cleared === undefined) return;
      await durable("stop intent clear", () => journal.append({ kind: "stop-intent-cleared", incarnation }, signal));
      // A record issued after this clear is the newer word: it stays.
      if (intents.get(incarnation) === cleared) intents.delete(incarnation);
    },

    openStopIntents: () => [...intents.values()],
    hasStopIntent: (incarnation) => intents.has(incarnation),
    openStopIntentsOn: (nodeId) => [...intents.onNode(nodeId)],
  };
}
