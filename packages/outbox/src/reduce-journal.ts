import type { Event } from "@warden/proto";
import { isTerminalEvent } from "@warden/events";
import type { JournalRecord, StopIntent } from "./journal-record.js";

/** What a journal's records add up to. */
export interface JournalState {
  /** Events with no `published` mark, in journal order. */
  readonly unpublished: ReadonlyMap<string, Event>;
  /** The last event of every incarnation that has one. */
  readonly lastEventByIncarnation: ReadonlyMap<string, Event>;
  /** Stop intents without a cleared record, by incarnation. */
  readonly openStopIntents: ReadonlyMap<string, StopIntent>;
  /** Highest epoch seen in epoch records and event sequences; 0 when none. */
  readonly maxEpoch: bigint;
}

/** Folds records left to right. Repeated event ids count once (the first copy wins). */
export function reduceJournal(records: Iterable<JournalRecord>): JournalState {
  const unpublished = new Map<string, Event>();
  const seen = new Set<string>();
  const last = new Map<string, Event>();
  const intents = new Map<string, StopIntent>();
  let maxEpoch = 0n;
  for (const r of records) {
    switch (r.kind) {
      case "event": {
        const e = r.event;
        if (seen.has(e.id)) break;
        seen.add(e.id);
        unpublished.set(e.id, e);
        if (e.incarnation !== "") last.set(e.incarnation, e);
        const epoch = e.sequence?.epoch ?? 0n;
        if (epoch > maxEpoch) maxEpoch = epoch;
        break;
      }
      case "published":
        for (const id of r.eventIds) unpublished.delete(id);
        break;
      case "stop-intent": {
        const { kind: _kind, ...intent } = r;
        intents.set(r.incarnation, intent);
        break;
      }
      case "stop-intent-cleared":
        intents.delete(r.incarnation);
        break;
      case "epoch":
        if (r.epoch > maxEpoch) maxEpoch = r.epoch;
        break;
    }
  }
  return { unpublished, lastEventByIncarnation: last, openStopIntents: intents, maxEpoch };
}

/** Incarnations whose last journaled event is not terminal, with that event. */
export function unfinishedInstances(state: JournalState): Event[] {
  return [...state.lastEventByIncarnation.values()].filter((e) => !isTerminalEvent(e));
}

/**
 * What compaction keeps, in journal order: every unpublished event; the last
 * event of each unfinished instance (with a `published` mark when it was
 * published, so it is not sent again but still earns a `recovered` after a
 * restart); open stop intents; the highest epoch. Folding the result gives the
 * same {@link JournalState} as folding the input, minus finished history.
 */
export function liveJournalRecords(records: readonly JournalRecord[]): JournalRecord[] {
  const state = reduceJournal(records);
  const keepLast = new Set(unfinishedInstances(state).map((e) => e.id));
  const out: JournalRecord[] = [];
  if (state.maxEpoch > 0n) out.push({ kind: "epoch", epoch: state.maxEpoch });
  const kept = new Set<string>();
  const publishedKept: string[] = [];
  for (const r of records) {
    if (r.kind !== "event" || kept.has(r.event.id)) continue;
    const id = r.event.id;
    const unpublished = state.unpublished.has(id);
    if (!unpublished && !keepLast.has(id)) continue;
    kept.add(id);
    out.push(r);
    if (!unpublished) publishedKept.push(id);
  }
  if (publishedKept.length > 0) out.push({ kind: "published", eventIds: publishedKept });
  for (const intent of state.openStopIntents.values()) out.push({ kind: "stop-intent", ...intent });
  return out;
}
