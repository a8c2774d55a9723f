import { readFileSync } from "node:fs";
import { credsAuthenticator, type ConnectionOptions, type NatsConnection } from "@nats-io/transport-node";
import { invalidArgument } from "@warden/common";
import { raceAbort } from "@warden/common";
import { connectGuarded } from "./guarded-node-transport.js";

/**
 * How the coordinator or a subscriber proves who it is to NATS. Prefer a creds
 * file (JWT + nkey seed, operator mode) in production: the file is read again on
 * every reconnect, so a rotated credential is picked up without a restart.
 */
export type NatsCredentials =
  | { readonly kind: "none" }
  | { readonly kind: "user-password"; readonly user: string; readonly password: string }
  | { readonly kind: "token"; readonly token: string }
  | { readonly kind: "creds-file"; readonly path: string };

export interface AuditConnectionOptions {
  /**
   * `nats://host:4222`, or several for a cluster: a list, or one string with
   * the URLs separated by commas (as `nats.url` and `--nats` take them).
   */
  readonly servers: string | readonly string[];
  /** @default { kind: "none" } */
  readonly credentials?: NatsCredentials;
  /** Connection name shown by the server's monitoring. @default "warden" */
  readonly name?: string;
  /** Pause between reconnect attempts (jittered by the client). @default 2000 */
  readonly reconnectTimeWaitMs?: number;
  /** Per-attempt connect timeout. @default 5000 */
  readonly connectTimeoutMs?: number;
  /**
   * Keep trying when the server is down at start instead of failing. The
   * coordinator sets it (NATS is optional and may come later) and publishes
   * through `createDeferredPublisher` meanwhile. @default false
   */
  readonly waitOnFirstConnect?: boolean;
  /**
   * Prefix of reply subjects (PubAcks, pulled messages, API answers). Give each
   * identity its own (`_INBOX_coordinator`) so its subscribe permission can be
   * narrowed to `<prefix>.>` instead of every `_INBOX.>` (see README). @default "_INBOX"
   */
  readonly inboxPrefix?: string;
  /**
   * Capture the caller's stack for every request so timeouts show where they
   * were issued. Off by default: nats.js then builds two Error objects per
   * publish, which cost about a fifth of the CPU of a busy publisher.
   * @default false
   */
  readonly asyncTraces?: boolean;
}

/**
 * The nats.js options for Warden: reconnect forever (`maxReconnectAttempts: -1`;
 * the outbox buffers meanwhile), credentials mapped to the client's options.
 */
export function natsConnectOptions(options: AuditConnectionOptions): ConnectionOptions {
  // nats.js reads "a,b,c" as one URL and dials only the last server in it (seen: a coordinator
  // whose audit link could not reach the cluster once that server was killed), so split it here.
  const servers = (typeof options.servers === "string" ? [options.servers] : [...options.servers]).flatMap((u) => u.split(",")).map((u) => u.trim()).filter((u) => u !== "");
  if (servers.length === 0) throw invalidArgument("servers", "at least one NATS URL is needed");
  const base: ConnectionOptions = {
    servers,
    name: options.name ?? "warden",
    maxReconnectAttempts: -1,
    reconnectTimeWait: options.reconnectTimeWaitMs ?? 2_000,
    timeout: options.connectTimeoutMs ?? 5_000,
    waitOnFirstConnect: options.waitOnFirstConnect ?? false,
    noAsyncTraces: !(options.asyncTraces ?? false),
    ...(options.inboxPrefix === undefined ? {} : { inboxPrefix: options.inboxPrefix }),
  };
  const creds = options.credentials ?? { kind: "none" };
  switch (creds.kind) {
    case "none":
      return base;
    case "user-password":
      if (creds.user === "") throw invalidArgument("credentials.user", "must not be empty");
      return { ...base, user: creds.user, pass: creds.password };
    case "token":
      if (creds.token === "") throw invalidArgument("credentials.token", "must not be empty");
      return { ...base, token: creds.token };
    case "creds-file": {
      const path = creds.path;
      // Read now to fail fast on a wrong path, and again on every reconnect.
      readFileSync(path);
      return { ...base, authenticator: credsAuthenticator(() => new Uint8Array(readFileSync(path))) };
    }
  }
}

/** The inbox prefix each connection was opened with, for subscriptions made on it later (acks). */
const inboxPrefixes = new WeakMap<NatsConnection, string>();

/** The inbox prefix `nc` was connected with through {@link connectAudit}, if one was set. */
export function inboxPrefixOf(nc: NatsConnection): string | undefined {
  return inboxPrefixes.get(nc);
}

/**
 * Connects to NATS with {@link natsConnectOptions}, over the transport that
 * survives a server dying mid-write (see `GuardedNodeTransport`). `signal`
 * stops waiting (the attempt is then closed).
 */
export async function connectAudit(options: AuditConnectionOptions, signal?: AbortSignal): Promise<NatsConnection> {
  const connecting = connectGuarded(natsConnectOptions(options));
  try {
    const nc = await raceAbort(connecting, signal);
    if (options.inboxPrefix !== undefined) inboxPrefixes.set(nc, options.inboxPrefix);
    return nc;
  } catch (err) {
    void connecting.then((nc) => nc.close()).catch(() => undefined);
    throw err;
  }
}
