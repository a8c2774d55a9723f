import { Kvm, type KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { deadlineSignal, invalidArgument, isPlanted, raceSignal, systemClock, type Clock } from "@warden/common";

export interface LeaseBucketOptions {
  /** KV bucket name. @default "warden-leader" */
  readonly bucket?: string;
  /** Copies of the bucket: 3 in an HA cluster, so it survives one server lost. @default 3, bounds 1–5 */
  readonly replicas?: number;
  /** Server answer timeout for every KV request on the handle. @default 1000, bounds 50–30 000 */
  readonly opTimeoutMs?: number;
  readonly clock?: Clock;
}

/** Bucket and key names: NATS subject tokens without wildcards, as KV allows. */
export const leaseNamePattern = /^[-/_=.a-zA-Z0-9]{1,128}$/;

/**
 * Opens (creating if absent) the lease bucket: history 1 (only the latest
 * holder matters), no TTL (nats-server 2.9 ignores per-key TTL; the lease
 * carries its own timing). Bounded by `opTimeoutMs` per attempt and `signal`.
 */
export async function openLeaseBucket(nc: NatsConnection, options: LeaseBucketOptions = {}, signal?: AbortSignal): Promise<KV> {
  const bucket = options.bucket ?? "warden-leader";
  const replicas = options.replicas ?? 3;
  const opTimeoutMs = options.opTimeoutMs ?? 1_000;
  if (!leaseNamePattern.test(bucket)) throw invalidArgument("bucket", "must be 1–128 of [-/_=.a-zA-Z0-9]");
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > 5) throw invalidArgument("replicas", "must be an integer from 1 to 5");
  if (!Number.isInteger(opTimeoutMs) || opTimeoutMs < 50 || opTimeoutMs > 30_000) throw invalidArgument("opTimeoutMs", "must be an integer from 50 to 30000 ms");
  // Stream creation waits for a replicated stream leader, which takes longer than one KV op.
  const d = deadlineSignal(options.clock ?? systemClock, opTimeoutMs * 10, "open lease bucket", signal);
  try {
    // Reads through the stream leader (no direct gets, which a lagging replica may answer):
    // the key's holder decides whether a won lease resumes in place.
    return await raceSignal(new Kvm(nc).create(bucket, { replicas, history: 1, timeout: opTimeoutMs, allow_direct: false }), d.signal);
  } finally {
    d.cleanup();
  }
}

/** The key that guards a takeover of `key` from `revision`: created once, by the one member that may take it. */
export function leaseClaimKey(key: string, revision: number): string {
  return `claim.${key}.${String(revision)}`;
}

/**
 * Takes `key` from `expectedRevision` (a takeover, not a renewal): at most one
 * caller per revision succeeds. A clustered nats-server 2.9 checks an update's
 * expected revision on the stream leader BEFORE replicating it, against what it
 * has applied so far, so two updates from the same revision sent within one
 * replication round (two standbys whose lease count ended together) are both
 * accepted. A create (expected revision 0) is checked again where it is
 * applied, on every replica, so exactly one create of a key succeeds: the
 * claim key decides the takeover, then the update moves the lease key. The
 * claim is a plain `put` expecting revision 0, never `kv.create`, which would
 * fall back to an update over a deleted key. Rejects like `kv.update`
 * (wrong-last-sequence when someone else claimed or wrote first).
 */
export async function takeLease(kv: KV, key: string, value: string, expectedRevision: number, timeoutMs: number): Promise<number> {
  // Planted bug "two-leaders-one-epoch": no claim, a bare update (accepted twice during a stream leader change).
  if (!isPlanted("two-leaders-one-epoch")) await kv.put(leaseClaimKey(key, expectedRevision), value, { previousSeq: 0, timeout: timeoutMs });
  return await kv.update(key, value, expectedRevision, timeoutMs);
}
