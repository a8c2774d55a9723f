import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { connectAudit, type NatsCredentials } from "@warden/audit";
import { Code, WardenError, backoffDelayMs, cryptoRng, nullLogger, sleep, systemClock, type Clock, type Logger } from "@warden/common";
import type { CoordinatorConfig } from "../config/coordinator-config.js";
import type { DurableStateStore } from "./durable-state-port.js";
import type { HaConfig } from "./ha-config.js";
import { openLeaseBucket } from "./lease-bucket.js";
import { openKvStateStore } from "./kv-state-store.js";
import { openJetStreamJournal, type JetStreamJournal } from "./jetstream-journal.js";
import type { JetStreamJournalOptions } from "./journal-stream.js";

/** What an HA member keeps open for its whole life, leader or standby: the "warm" part of a takeover. */
export interface HaNats {
  readonly nc: NatsConnection;
  readonly leaseKv: KV;
  readonly state: DurableStateStore;
  /** A fresh journal handle on the (already created) stream: one stream info and one last-message read. */
  openJournal(signal?: AbortSignal, fence?: Pick<JetStreamJournalOptions, "writerEpoch" | "onSuperseded">): Promise<JetStreamJournal>;
}

export function natsCredentialsOf(n: NonNullable<CoordinatorConfig["nats"]>): NatsCredentials {
  if (n.credsFile !== undefined) return { kind: "creds-file", path: n.credsFile };
  if (n.token !== undefined) return { kind: "token", token: n.token };
  if (n.user !== undefined) return { kind: "user-password", user: n.user, password: n.pass ?? "" };
  return { kind: "none" };
}

/** The lease KV's per-call deadline: 1 s, or less when the lease is short (the keeper needs it below lease − margin). */
export function leaseOpTimeoutMs(ha: HaConfig): number {
  return Math.min(1_000, ha.leaseMs - ha.marginMs - 1);
}

/**
 * A failure worth another try at start-up: no answer in time, or JetStream not
 * ready (a cluster just started is still electing its meta leader). Anything
 * else — a refused configuration, bad credentials — is the operator's to fix.
 */
function isTransient(err: unknown): boolean {
  if (err instanceof WardenError) return err.code === Code.Unavailable || err.code === Code.DeadlineExceeded;
  const text = err instanceof Error ? `${err.name} ${err.message}` : String(err);
  return /timeout|timed out|no responders|temporarily unavailable|no suitable peers|insufficient resources|leader/i.test(text);
}

/**
 * Connects to the NATS cluster (every URL of `nats.url`, reconnecting forever,
 * waiting for the first server like the audit link) and opens, creating if
 * absent, the lease bucket, the state bucket and the journal stream, each
 * with `ha.replicas` copies. A transient failure while opening them (two
 * members starting with the cluster, whose first requests timed out and
 * made one exit) is retried, 250 ms doubling to 5 s and logged, until
 * `signal` aborts; any other failure is thrown.
 */
export async function openHaNats(
  n: NonNullable<CoordinatorConfig["nats"]>,
  ha: HaConfig,
  name: string,
  signal?: AbortSignal,
  o: { readonly log?: Logger; readonly clock?: Clock } = {},
): Promise<HaNats> {
  const nc = await connectAudit(
    {
      servers: n.url, // connectAudit splits the comma list
      credentials: natsCredentialsOf(n),
      name,
      waitOnFirstConnect: true,
      // A standby must notice a dead server quickly: the lease moves on a seconds scale.
      reconnectTimeWaitMs: 250,
      connectTimeoutMs: 2_000,
      ...(n.inboxPrefix === undefined ? {} : { inboxPrefix: n.inboxPrefix }),
    },
    signal,
  );
  const log = o.log ?? nullLogger;
  const clock = o.clock ?? systemClock;
  try {
    for (let attempt = 1; ; attempt++) {
      try {
        const leaseKv = await openLeaseBucket(nc, { replicas: ha.replicas, opTimeoutMs: leaseOpTimeoutMs(ha) }, signal);
        const state = await openKvStateStore(nc, { replicas: ha.replicas }, signal);
        // Creates the stream now, so a takeover only reads where it ends.
        (await openJetStreamJournal(nc, { replicas: ha.replicas }, signal)).close();
        return { nc, leaseKv, state, openJournal: (s, fence) => openJetStreamJournal(nc, { replicas: ha.replicas, ...fence }, s) };
      } catch (err) {
        if (signal?.aborted === true || !isTransient(err)) throw err;
        const waitMs = backoffDelayMs({ initialMs: 250, factor: 2, maxMs: 5_000, jitter: 0 }, attempt - 1, cryptoRng);
        log.warn("JetStream not ready for the HA buckets and journal; retrying", { attempt, waitMs, err: err instanceof Error ? err.message : String(err) });
        await sleep(clock, waitMs, signal);
      }
    }
  } catch (err) {
    await nc.close().catch(() => undefined);
    throw err;
  }
}
