import { Kvm, type KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { deadlineSignal, invalidArgument, raceSignal, systemClock, type Clock } from "@warden/common";

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
