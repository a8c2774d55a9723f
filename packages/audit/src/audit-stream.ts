import type { NatsConnection } from "@nats-io/transport-node";
import { JetStreamApiCodes, JetStreamApiError, RetentionPolicy, DiscardPolicy, StorageType, jetstreamManager } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import { Code, WardenError, invalidArgument } from "@warden/common";
import { allEventsSubject } from "@warden/events";
import { raceAbort } from "@warden/common";

/** Name of the audit stream unless configured otherwise. */
export const defaultAuditStreamName = "WARDEN_EVENTS";

/**
 * Floors under which an audit stream keeps too little to audit: events older
 * than an hour, or more than 1 MiB back, gone. Options below them are refused
 * and the coordinator reports a stream below them as drift.
 */
export const auditStreamMinAgeMs = 3_600_000;
export const auditStreamMinBytes = 1 << 20;

export interface AuditStreamOptions {
  /** @default "WARDEN_EVENTS" */
  readonly name?: string;
  /** How long events are kept. @default 604800000 (7 days), at least 3600000 (1 h) */
  readonly maxAgeMs?: number;
  /** Size cap of the stream; the oldest events go first beyond it. -1 = unlimited. @default -1, else at least 1048576 (1 MiB) */
  readonly maxBytes?: number;
  /**
   * Window in which JetStream drops a re-sent `Nats-Msg-Id`. At least 2 min,
   * so a publish retried after an ack timeout is never stored twice; the
   * subscriber de-duplicates beyond it. @default 120000
   */
  readonly duplicateWindowMs?: number;
  /** @default 1 */
  readonly replicas?: number;
}

export interface AuditStreamResult {
  readonly action: "created" | "updated";
  readonly name: string;
}

export interface ResolvedAuditStreamOptions {
  readonly name: string;
  readonly maxAgeMs: number;
  readonly maxBytes: number;
  readonly duplicateWindowMs: number;
  readonly replicas?: number;
}

/** The options with their defaults, or INVALID_ARGUMENT naming the field (checked before any I/O). */
export function resolveAuditStreamOptions(options: AuditStreamOptions): ResolvedAuditStreamOptions {
  const name = options.name ?? defaultAuditStreamName;
  const maxAgeMs = options.maxAgeMs ?? 7 * 24 * 3_600_000;
  const maxBytes = options.maxBytes ?? -1;
  const duplicateWindowMs = options.duplicateWindowMs ?? 120_000;
  if (name === "") throw invalidArgument("name", "must not be empty");
  if (duplicateWindowMs < 120_000) throw invalidArgument("duplicateWindowMs", "must be at least 120000 (2 min)");
  if (!(maxAgeMs >= auditStreamMinAgeMs)) throw invalidArgument("maxAgeMs", `must be at least ${String(auditStreamMinAgeMs)} (1 h)`);
  if (!(maxBytes === -1 || maxBytes >= auditStreamMinBytes)) throw invalidArgument("maxBytes", `must be -1 (unlimited) or at least ${String(auditStreamMinBytes)} (1 MiB)`);
  if (duplicateWindowMs > maxAgeMs) throw invalidArgument("duplicateWindowMs", "must not exceed maxAgeMs");
  return { name, maxAgeMs, maxBytes, duplicateWindowMs, ...(options.replicas === undefined ? {} : { replicas: options.replicas }) };
}

/**
 * The provisioning step: creates the audit stream (file storage, subjects
 * `warden.events.>`, limits retention) or updates an existing one to the
 * given limits. Run by `warden nats provision` as a NATS user allowed to
 * create and update the stream; the coordinator never calls it (it only
 * checks the stream: `checkAuditStream`). An existing stream with memory
 * storage is FAILED_PRECONDITION (storage cannot be changed in place).
 */
export async function ensureAuditStream(nc: NatsConnection, options: AuditStreamOptions = {}, signal?: AbortSignal): Promise<AuditStreamResult> {
  const { name, maxAgeMs, maxBytes, duplicateWindowMs } = resolveAuditStreamOptions(options);
  const jsm = await raceAbort(jetstreamManager(nc), signal);
  const limits = {
    subjects: [allEventsSubject],
    max_age: nanos(maxAgeMs),
    max_bytes: maxBytes,
    duplicate_window: nanos(duplicateWindowMs),
    num_replicas: options.replicas ?? 1,
    // An update merges into the stream's config: caps Warden never sets are reset explicitly.
    max_msgs: -1,
    max_msgs_per_subject: -1,
    max_msg_size: -1,
    discard: DiscardPolicy.Old,
    allow_rollup_hdrs: false,
  };
  try {
    const info = await raceAbort(jsm.streams.info(name), signal);
    if (info.config.storage !== StorageType.File) {
      throw new WardenError(Code.FailedPrecondition, `audit stream ${name} exists with ${info.config.storage} storage; file storage is required (delete it or pick another name)`);
    }
    await raceAbort(jsm.streams.update(name, limits), signal);
    return { action: "updated", name };
  } catch (err) {
    if (!(err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound)) throw err;
  }
  await raceAbort(
    jsm.streams.add({ name, ...limits, storage: StorageType.File, retention: RetentionPolicy.Limits }),
    signal,
  );
  return { action: "created", name };
}
