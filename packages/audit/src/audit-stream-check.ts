import type { NatsConnection } from "@nats-io/transport-node";
import { DiscardPolicy, JetStreamApiCodes, JetStreamApiError, RetentionPolicy, StorageType, jetstreamManager, type StreamConfig } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import { Code, WardenError } from "@warden/common";
import { allEventsSubject } from "@warden/events";
import { raceAbort } from "@warden/common";
import { auditStreamMinAgeMs, auditStreamMinBytes, resolveAuditStreamOptions, type AuditStreamOptions, type ResolvedAuditStreamOptions } from "./audit-stream.js";

/**
 * One way the audit stream's configuration differs from what Warden needs.
 * `dangerous`: events would not be stored, or not kept — the coordinator does
 * not publish to such a stream (the outbox keeps them) until it is fixed.
 */
export interface AuditStreamDrift {
  readonly field: string;
  readonly found: string;
  readonly want: string;
  readonly dangerous: boolean;
}

/** `limit` <= 0 means unlimited in JetStream configs (the server shows -1, some clients 0). */
const unlimited = (limit: number | undefined): boolean => limit === undefined || limit <= 0;
const ns = (n: number | undefined): string => (n === undefined ? "unset" : `${String(n / 1e9)}s`);

/**
 * Compares an existing audit stream's configuration with what the coordinator
 * needs. Pure. Retention limits that are the operator's choice (max_age,
 * max_bytes above their floors) are not drift; anything Warden never sets —
 * a message-count cap, rollups, a sealed stream — is.
 */
export function auditStreamDrift(found: Partial<StreamConfig>, want: ResolvedAuditStreamOptions): AuditStreamDrift[] {
  const out: AuditStreamDrift[] = [];
  const add = (field: string, f: string, w: string, dangerous: boolean): void => {
    out.push({ field, found: f, want: w, dangerous });
  };
  const subjects = found.subjects ?? [];
  if (!subjects.includes(allEventsSubject)) add("subjects", subjects.join(",") || "none", allEventsSubject, true);
  else if (subjects.length !== 1) add("subjects", subjects.join(","), allEventsSubject, false);
  if (found.storage !== StorageType.File) add("storage", String(found.storage), StorageType.File, true);
  if (found.retention !== RetentionPolicy.Limits) add("retention", String(found.retention), RetentionPolicy.Limits, true);
  if (found.sealed === true) add("sealed", "true", "false", true);
  if (found.mirror !== undefined) add("mirror", found.mirror.name, "none", true);
  if (!unlimited(found.max_msgs)) add("max_msgs", String(found.max_msgs), "-1", false);
  if (!unlimited(found.max_msgs_per_subject)) add("max_msgs_per_subject", String(found.max_msgs_per_subject), "-1", false);
  if (!unlimited(found.max_msg_size)) add("max_msg_size", String(found.max_msg_size), "-1", false);
  if (!unlimited(found.max_age) && (found.max_age ?? 0) < nanos(auditStreamMinAgeMs)) add("max_age", ns(found.max_age), `>= ${ns(nanos(auditStreamMinAgeMs))}`, false);
  if (!unlimited(found.max_bytes) && (found.max_bytes ?? 0) < auditStreamMinBytes) add("max_bytes", String(found.max_bytes), `>= ${String(auditStreamMinBytes)}`, false);
  if (found.discard === DiscardPolicy.New) add("discard", DiscardPolicy.New, DiscardPolicy.Old, false);
  if ((found.duplicate_window ?? 0) < nanos(want.duplicateWindowMs)) add("duplicate_window", ns(found.duplicate_window), `>= ${ns(nanos(want.duplicateWindowMs))}`, false);
  const replicas = want.replicas ?? 1;
  if ((found.num_replicas ?? 1) < replicas) add("num_replicas", String(found.num_replicas ?? 1), `>= ${String(replicas)}`, false);
  // A publisher could send a Nats-Rollup header and purge the stream with publish rights alone.
  if (found.allow_rollup_hdrs === true) add("allow_rollup_hdrs", "true", "false", false);
  return out;
}

/** One line, e.g. `max_msgs 1 (want -1), storage memory (want file)`. */
export function describeAuditStreamDrift(drift: readonly AuditStreamDrift[]): string {
  return drift.map((d) => `${d.field} ${d.found} (want ${d.want})`).join(", ");
}

export interface AuditStreamCheck {
  /** `created`: the stream was missing and the coordinator created it (a setup without provisioning). */
  readonly action: "created" | "found";
  readonly name: string;
  /** Empty when the stream is as Warden needs it. */
  readonly drift: readonly AuditStreamDrift[];
}

/**
 * What the coordinator does on every (re)connect: reads the audit stream's
 * configuration and compares it (`auditStreamDrift`); never changes an
 * existing stream. A missing stream is created with the given options, which
 * works where the NATS user may create streams (the embedded dev setup, a
 * server without permissions); with the shipped least-privilege permissions
 * the server refuses, and the error says to run `warden nats provision`.
 */
export async function checkAuditStream(nc: NatsConnection, options: AuditStreamOptions = {}, signal?: AbortSignal): Promise<AuditStreamCheck> {
  const o = resolveAuditStreamOptions(options);
  const jsm = await raceAbort(jetstreamManager(nc), signal);
  try {
    const info = await raceAbort(jsm.streams.info(o.name), signal);
    return { action: "found", name: o.name, drift: auditStreamDrift(info.config, o) };
  } catch (err) {
    if (!(err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound)) throw err;
  }
  try {
    await raceAbort(
      jsm.streams.add({
        name: o.name,
        subjects: [allEventsSubject],
        max_age: nanos(o.maxAgeMs),
        max_bytes: o.maxBytes,
        duplicate_window: nanos(o.duplicateWindowMs),
        num_replicas: o.replicas ?? 1,
        storage: StorageType.File,
        retention: RetentionPolicy.Limits,
        discard: DiscardPolicy.Old,
      }),
      signal,
    );
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    // Refused by permissions (the shipped setup): the operator's step is missing. Anything else (no quorum yet, a timeout) is retried as it is.
    if (!/permissions violation/i.test(why)) throw err;
    throw new WardenError(Code.FailedPrecondition, `audit stream ${o.name} does not exist and this NATS user may not create it (${why}): run \`warden nats provision\` as the provisioning user`, { cause: err });
  }
  return { action: "created", name: o.name, drift: [] };
}
