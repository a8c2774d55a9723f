import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { Code, WardenError, deadlineSignal, invalidArgument, raceSignal, systemClock, type Clock } from "@warden/common";
import { stateSections, type DurableStateStore, type StateEntry, type StateSection } from "./durable-state-port.js";

export interface KvStateStoreOptions {
  /** KV bucket name. @default "warden-state" */
  readonly bucket?: string;
  /** Copies of the bucket: 3 in an HA cluster (a write is acked by 2 of 3). @default 3, bounds 1–5 */
  readonly replicas?: number;
  /** Deadline of one call (server answer included). @default 2000, bounds 50–60 000 */
  readonly opTimeoutMs?: number;
  /** Largest JSON value accepted (INVALID_ARGUMENT above it). @default 65536, bounds 64 – 1 048 576 */
  readonly maxValueBytes?: number;
  /** Longest id accepted (node id, model, incarnation). @default 256 chars, bounds 1–1024 */
  readonly maxIdChars?: number;
  readonly clock?: Clock;
}

const bucketPattern = /^[-_a-zA-Z0-9]{1,64}$/;

/**
 * The durable-state port on a JetStream KV bucket: history 1, file storage,
 * `replicas` copies. Keys are `<section>.<base64url(id)>`, so any id is a
 * valid key token and one section is one key filter. Writes use the KV's
 * revision checks (`create` for revision 0, `update` / `delete` with the
 * expected revision otherwise); the server refuses a stale one atomically.
 */
export async function openKvStateStore(nc: NatsConnection, options: KvStateStoreOptions = {}, signal?: AbortSignal): Promise<DurableStateStore> {
  const bucket = options.bucket ?? "warden-state";
  const replicas = options.replicas ?? 3;
  const opTimeoutMs = options.opTimeoutMs ?? 2_000;
  const maxValueBytes = options.maxValueBytes ?? 64 * 1024;
  const maxIdChars = options.maxIdChars ?? 256;
  const clock = options.clock ?? systemClock;
  if (!bucketPattern.test(bucket)) throw invalidArgument("bucket", "must be 1–64 of [-_a-zA-Z0-9]");
  const int = (field: string, v: number, lo: number, hi: number): void => {
    if (!Number.isInteger(v) || v < lo || v > hi) throw invalidArgument(field, `must be an integer from ${String(lo)} to ${String(hi)}`);
  };
  int("replicas", replicas, 1, 5);
  int("opTimeoutMs", opTimeoutMs, 50, 60_000);
  int("maxValueBytes", maxValueBytes, 64, 1024 * 1024);
  int("maxIdChars", maxIdChars, 1, 1024);

  const unavailable = (what: string, err: unknown): WardenError => {
    if (err instanceof WardenError && (err.code === Code.Canceled || err.code === Code.Aborted)) return err;
    return new WardenError(Code.Unavailable, `state store ${bucket}: ${what} not acknowledged by a quorum of its replicas (${err instanceof Error ? err.message : String(err)})`, {
      cause: err,
      details: { bucket },
    });
  };
  // One deadline per call; `what` names the call in the error.
  const bounded = async <T>(what: string, timeoutMs: number, sig: AbortSignal | undefined, f: () => Promise<T>): Promise<T> => {
    const d = deadlineSignal(clock, timeoutMs, `state store ${bucket}: ${what}`, sig);
    try {
      return await raceSignal(f(), d.signal);
    } catch (err) {
      throw unavailable(what, err);
    } finally {
      d.cleanup();
    }
  };

  // Bucket creation waits for a replicated stream leader: a wider deadline than one op.
  // No direct gets: on nats-server 2.9 any replica answers one, a lagging follower
  // included, and a takeover then read a setting acked by the other two as absent
  // (the new leader ran on the config's policy). Gets go through the stream leader.
  const kv: KV = await bounded("open", opTimeoutMs * 10, signal, () => new Kvm(nc).create(bucket, { replicas, history: 1, timeout: opTimeoutMs, allow_direct: false }));
  const jsm = await jetstreamManager(nc, { timeout: opTimeoutMs, checkAPI: false });
  const stream = `KV_${bucket}`;
  const subjectPrefix = `$KV.${bucket}.`;

  const key = (section: StateSection, id: string): string => {
    if (!stateSections.includes(section)) throw invalidArgument("section", `must be one of ${stateSections.join(", ")}`);
    if (id.length === 0 || id.length > maxIdChars) throw invalidArgument("id", `must be 1–${String(maxIdChars)} characters`);
    return `${section}.${Buffer.from(id, "utf8").toString("base64url")}`;
  };
  const decode = (bytes: Uint8Array): unknown => JSON.parse(Buffer.from(bytes).toString("utf8"));
  const isConflict = (err: unknown): boolean => /wrong last sequence|key exists/i.test(err instanceof Error ? err.message : String(err));

  return {
    name: bucket,

    async get(section, id, sig) {
      const k = key(section, id);
      return await bounded("get", opTimeoutMs, sig, async () => {
        const e = await kv.get(k);
        return e === null || e.operation !== "PUT" ? undefined : { value: decode(e.value), revision: e.revision };
      });
    },

    async load(section, sig) {
      if (!stateSections.includes(section)) throw invalidArgument("section", `must be one of ${stateSections.join(", ")}`);
      // Start-up read of one section: its keys, then each entry (a handful to a few thousand).
      return await bounded("load", opTimeoutMs * 10, sig, async () => {
        const out = new Map<string, StateEntry>();
        // The keys come from the stream's per-subject counts, which its leader answers: no consumer.
        // `kv.keys` creates one, and on nats-server 2.9 an ephemeral consumer can be placed on a
        // server that was just lost: with one of three servers down a third of the loads timed out
        // for half a minute, and every takeover in that window failed.
        const info = await jsm.streams.info(stream, { subjects_filter: `${subjectPrefix}${section}.>` });
        const names = Object.keys(info.state.subjects ?? {}).map((subject) => subject.slice(subjectPrefix.length));
        for (const k of names) {
          const e = await kv.get(k);
          if (e === null || e.operation !== "PUT") continue;
          out.set(Buffer.from(k.slice(section.length + 1), "base64url").toString("utf8"), { value: decode(e.value), revision: e.revision });
        }
        return out;
      });
    },

    async put(section, id, value, expectedRevision, sig) {
      const k = key(section, id);
      if (!Number.isInteger(expectedRevision) || expectedRevision < 0) throw invalidArgument("expectedRevision", "must be an integer ≥ 0");
      const json = JSON.stringify(value) as string | undefined;
      if (json === undefined) throw invalidArgument("value", "must be JSON-serialisable");
      const bytes = Buffer.from(json, "utf8");
      if (bytes.length > maxValueBytes) throw invalidArgument("value", `larger than ${String(maxValueBytes)} bytes as JSON`);
      return await bounded("put", opTimeoutMs, sig, async () => {
        try {
          return expectedRevision === 0 ? await kv.create(k, bytes) : await kv.update(k, bytes, expectedRevision, opTimeoutMs);
        } catch (err) {
          if (isConflict(err)) throw new WardenError(Code.Aborted, `state store ${bucket}: ${section} "${id}" changed since revision ${String(expectedRevision)}: read it again`, { cause: err });
          throw err;
        }
      });
    },

    async remove(section, id, expectedRevision, sig) {
      const k = key(section, id);
      if (!Number.isInteger(expectedRevision) || expectedRevision < 1) throw invalidArgument("expectedRevision", "must be the entry's revision (≥ 1)");
      await bounded("remove", opTimeoutMs, sig, async () => {
        try {
          await kv.delete(k, { previousSeq: expectedRevision });
        } catch (err) {
          if (isConflict(err)) throw new WardenError(Code.Aborted, `state store ${bucket}: ${section} "${id}" changed since revision ${String(expectedRevision)}: read it again`, { cause: err });
          throw err;
        }
      });
    },
  };
}
