import type { Event } from "@warden/proto";

/**
 * A stop intent (DESIGN §3.3 step 4): written, fsync'd, before a stop is sent,
 * so a restarted coordinator adopts a still-running instance as a leftover,
 * never as a routable model. Cleared by a settle of row 2 or 3; row 4 keeps it
 * until the leftover is reaped.
 */
export interface StopIntent {
  readonly incarnation: string;
  readonly nodeId: string;
  readonly model: string;
  readonly address: string;
  /** Why the stop was sent (an eviction reason such as `lru`, `admin`, `drain`). */
  readonly reason: string;
  /** Wall time the intent was recorded, ms since the Unix epoch. */
  readonly recordedAtMs: number;
}

/**
 * One record of the coordinator's journal, shared by the audit outbox and the
 * loader's stop intents. The journal stores them in append order; replay folds
 * them left to right (see {@link reduceJournal}).
 *
 * - `event`: an audit event, appended before it may be published.
 * - `published`: these events are settled — acknowledged by the stream, or
 *   displaced from a full outbox by a critical event and never to be sent (a
 *   batch of ids; a lost mark only causes a re-publish that `Nats-Msg-Id`
 *   de-duplicates).
 * - `stop-intent` / `stop-intent-cleared`: open and close a stop intent.
 * - `epoch`: the coordinator epoch in use from here on, so epochs keep growing
 *   even after compaction dropped every event that carried the old one.
 */
export type JournalRecord =
  | { readonly kind: "event"; readonly event: Event }
  | { readonly kind: "published"; readonly eventIds: readonly string[] }
  | ({ readonly kind: "stop-intent" } & StopIntent)
  | { readonly kind: "stop-intent-cleared"; readonly incarnation: string }
  | { readonly kind: "epoch"; readonly epoch: bigint };

export type JournalRecordKind = JournalRecord["kind"];
