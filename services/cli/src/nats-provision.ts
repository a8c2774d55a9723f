import { auditStreamMinAgeMs, auditStreamMinBytes, connectAudit, describeNatsError, ensureAuditStream, provisionAuditDurable, resolveAuditStreamOptions, type NatsCredentials } from "@warden/audit";
import { Code, WardenError, invalidArgument, parseDurationMs } from "@warden/common";

/** `warden nats provision` options, as commander hands them over. */
export interface NatsProvisionOptions {
  readonly url: string;
  readonly creds?: string;
  readonly token?: string;
  readonly user?: string;
  readonly inboxPrefix: string;
  readonly stream: string;
  readonly maxAge: string;
  readonly maxBytes: string;
  readonly replicas: string;
  readonly durable: readonly string[];
  /** Also the HA lease bucket, state bucket and journal stream, with `replicas` copies. */
  readonly ha: boolean;
  readonly timeout: string;
}

/** The longest retention `--max-age` takes: ten years. */
const maxAgeCapMs = 3_650 * 86_400_000;

function credentialsOf(o: NatsProvisionOptions, env: Readonly<Record<string, string | undefined>>): NatsCredentials {
  if (o.creds !== undefined) return { kind: "creds-file", path: o.creds };
  if (o.token !== undefined || env["NATS_TOKEN"] !== undefined) return { kind: "token", token: o.token ?? env["NATS_TOKEN"] ?? "" };
  if (o.user !== undefined) return { kind: "user-password", user: o.user, password: env["NATS_PASSWORD"] ?? "" };
  return { kind: "none" };
}

/**
 * Creates (or brings to the given limits) the audit stream, the readers'
 * durable consumers and, with `ha`, the HA buckets and journal stream — as
 * a NATS user allowed to, so the coordinator's user needs no such right.
 * Every option is checked before connecting. Returns the lines to print.
 */
export async function natsProvision(o: NatsProvisionOptions, env: Readonly<Record<string, string | undefined>>): Promise<string[]> {
  const replicas = Number(o.replicas);
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > 5) throw invalidArgument("--replicas", "must be an integer from 1 to 5");
  const maxBytes = Number(o.maxBytes);
  if (!Number.isInteger(maxBytes)) throw invalidArgument("--max-bytes", `must be an integer (-1: unlimited), got "${o.maxBytes}"`);
  if (maxBytes !== -1 && maxBytes < auditStreamMinBytes) throw invalidArgument("--max-bytes", `must be -1 (unlimited) or at least ${String(auditStreamMinBytes)} (1 MiB), got ${o.maxBytes}`);
  const maxAgeMs = parseDurationMs(o.maxAge, "--max-age", maxAgeCapMs);
  if (maxAgeMs < auditStreamMinAgeMs) throw invalidArgument("--max-age", `must be at least 1h (an audit trail kept shorter is drift), got ${o.maxAge}`);
  const stream = { name: o.stream, maxAgeMs, maxBytes, replicas };
  resolveAuditStreamOptions(stream);
  const timeoutMs = parseDurationMs(o.timeout, "--timeout");
  const signal = AbortSignal.timeout(timeoutMs);
  const nc = await connectAudit({ servers: o.url, credentials: credentialsOf(o, env), inboxPrefix: o.inboxPrefix, name: "warden-nats-provision", waitOnFirstConnect: false }, signal).catch((err: unknown) => {
    // Exit 3 (retry later) for a server not there, with the reason and, for a refused credential, the hint.
    throw new WardenError(Code.Unavailable, `cannot connect to NATS at ${o.url}: ${describeNatsError(err)}`, { cause: err });
  });
  try {
    const lines: string[] = [];
    const r = await ensureAuditStream(nc, stream, signal);
    lines.push(`stream  ${r.name}: ${r.action} (file storage, subjects warden.events.>, max age ${o.maxAge}, max bytes ${String(maxBytes)}, ${String(replicas)} replica(s))`);
    for (const durable of o.durable) {
      lines.push(`durable ${r.name}/${durable}: ${await provisionAuditDurable(nc, { stream: r.name, durable }, signal)}`);
    }
    if (o.ha) {
      // The coordinator's own openers: the same configurations it would create, created only where missing.
      const { openLeaseBucket } = await import("../../coordinator/src/ha/lease-bucket.js");
      const { openKvStateStore } = await import("../../coordinator/src/ha/kv-state-store.js");
      const { ensureJournalStream, resolveJournalOptions } = await import("../../coordinator/src/ha/journal-stream.js");
      await openLeaseBucket(nc, { replicas }, signal);
      lines.push(`bucket  warden-leader (stream KV_warden-leader): ready, ${String(replicas)} replica(s)`);
      await openKvStateStore(nc, { replicas }, signal);
      lines.push(`bucket  warden-state (stream KV_warden-state): ready, ${String(replicas)} replica(s)`);
      const jo = resolveJournalOptions({ replicas }, nc.info?.max_payload ?? 1024 * 1024);
      await ensureJournalStream(nc, jo, signal);
      lines.push(`stream  ${jo.stream}: ready, ${String(replicas)} replica(s)`);
    }
    return lines;
  } finally {
    await nc.close().catch(() => undefined);
  }
}
