import type { NatsConnection } from "@nats-io/transport-node";
import { Code, WardenError, backoffDelayMs, cryptoRng, isWardenError, nullLogger, sleep, systemClock, type BackoffPolicy, type Clock, type Logger, type Rng } from "@warden/common";
import type { Publisher } from "@warden/outbox";
import { resolveAuditStreamOptions, type AuditStreamOptions } from "./audit-stream.js";
import { checkAuditStream, describeAuditStreamDrift, type AuditStreamDrift } from "./audit-stream-check.js";
import { connectAudit, natsConnectOptions, type AuditConnectionOptions } from "./nats-connection.js";
import { createNatsPublisher, type NatsPublisher, type NatsPublisherOptions } from "./nats-publisher.js";
import { createRepeatLimiter } from "./repeat-limiter.js";

/**
 * Where the link to the audit stream is. Only `ready` publishes: the stream
 * was checked (found fit, or created when missing) on the current connection.
 */
export type AuditLinkState =
  | { readonly status: "connecting"; readonly attempts: number; readonly lastError: string | undefined }
  | { readonly status: "ensuring-stream"; readonly attempts: number; readonly lastError: string | undefined }
  | { readonly status: "ready"; readonly stream: string }
  | { readonly status: "disconnected"; readonly server: string }
  | { readonly status: "closed" };

/** One line for health reasons and UNAVAILABLE errors. */
export function describeAuditLinkState(s: AuditLinkState): string {
  switch (s.status) {
    case "connecting":
      return s.lastError === undefined ? "connecting to NATS" : `connecting to NATS (${String(s.attempts)} failed attempts, last: ${s.lastError})`;
    case "ensuring-stream":
      return s.lastError === undefined ? "checking the audit stream" : `checking the audit stream (${String(s.attempts)} failed attempts, last: ${s.lastError})`;
    case "ready":
      return `audit stream ${s.stream} ready`;
    case "disconnected":
      return `NATS connection to ${s.server} lost, reconnecting`;
    case "closed":
      return "audit link closed";
  }
}

/** Connect and stream-setup retries: quick at first (NATS coming up alongside), capped so a long outage costs little. */
export const auditLinkBackoff: BackoffPolicy = { initialMs: 250, factor: 1.6, maxMs: 10_000, jitter: 0.2 };

export interface AuditLinkOptions {
  /** `waitOnFirstConnect` is the link's business (it retries each attempt itself). */
  readonly connection: Omit<AuditConnectionOptions, "waitOnFirstConnect">;
  readonly stream?: AuditStreamOptions;
  /** The stream name comes from `stream`. */
  readonly publisher?: Omit<NatsPublisherOptions, "streamName" | "onNoStream">;
  readonly clock?: Clock;
  /** Backoff jitter. */
  readonly rng?: Rng;
  readonly logger?: Logger;
  /** Between failed connects, and between failed stream setups. @default auditLinkBackoff (250 ms × 1.6 up to 10 s, 20 % jitter) */
  readonly retryBackoff?: BackoffPolicy;
  /** A failure with the same reason as the last one logged is logged again at most this often (a new reason at once). @default 60000 */
  readonly repeatLogEveryMs?: number;
  /** Every state change, in order (map to the `warden.audit` health service). */
  readonly onStateChange?: (state: AuditLinkState) => void;
}

/**
 * The coordinator's link to JetStream: a Publisher that works whenever the
 * audit stream is confirmed and fails fast with UNAVAILABLE otherwise (the
 * outbox keeps the events and retries), and the state for health.
 */
export interface AuditLink {
  /** For the outbox; `onReady` fires each time the link becomes `ready`. */
  readonly publisher: Publisher;
  state(): AuditLinkState;
  /** The current connection, while there is one (tests, diagnostics). */
  connection(): NatsConnection | undefined;
  /**
   * How the audit stream's configuration differs from what Warden needs, as
   * found by the last check (empty before any, and when it is fit). For the
   * `warden_audit_stream_drift` metric.
   */
  streamDrift(): readonly AuditStreamDrift[];
  /** Cancels retries and closes the connection; resolves when nothing of the link is left running. */
  close(): Promise<void>;
}

/** `err` as one line, with its cause and a hint where the fix is the operator's. */
export function describeNatsError(err: unknown): string {
  if (isWardenError(err)) return err.rawMessage;
  if (!(err instanceof Error)) return String(err);
  let s = err.message === "" ? err.name : err.message;
  const cause = err.cause instanceof Error ? err.cause.message : undefined;
  if (cause !== undefined && cause !== "" && !s.includes(cause)) s += ` (${cause})`;
  if (err.name === "AuthorizationError") s += ": the server refused the credentials (check the configured token, user/pass or creds file)";
  return s;
}

/**
 * Starts connecting in the background and returns at once. The link:
 * - connects with one attempt per try (no `waitOnFirstConnect`), retrying
 *   forever with `retryBackoff`; each failure is logged with its reason
 *   (e.g. "Authorization Violation"), the same reason again at most every
 *   `repeatLogEveryMs` with the count of attempts in between;
 * - checks the audit stream on every connect and reconnect (retrying the
 *   same way) and again when a publish finds no stream, and is `ready` only
 *   once it is found fit (`checkAuditStream`: never changed, created only
 *   when missing). Drift is logged at warn on every check and kept for
 *   `streamDrift()`; dangerous drift (events not stored, or not kept) is a
 *   failure like any other: not ready, retried, so fixing the stream is
 *   picked up without a restart;
 * - lets nats.js reconnect a connection that was up, and starts over with a
 *   new one when nats.js gives up (it does after repeated auth failures).
 *
 * Stream options are validated now (INVALID_ARGUMENT), as are server lists
 * and empty secrets; an unreadable creds file is a failure to retry, so a
 * credential mounted late is picked up.
 */
export function startAuditLink(options: AuditLinkOptions): AuditLink {
  const clock = options.clock ?? systemClock;
  const rng = options.rng ?? cryptoRng;
  const log = options.logger ?? nullLogger;
  const policy = options.retryBackoff ?? auditLinkBackoff;
  const streamOptions = options.stream ?? {};
  const streamName = resolveAuditStreamOptions(streamOptions).name;
  try {
    natsConnectOptions(options.connection);
  } catch (err) {
    if (isWardenError(err, Code.InvalidArgument)) throw err;
  }
  const servers = typeof options.connection.servers === "string" ? [options.connection.servers] : [...options.connection.servers];
  const limiter = createRepeatLimiter(clock, options.repeatLogEveryMs ?? 60_000);
  const ctl = new AbortController();
  const signal = ctl.signal;
  const closing = (): boolean => signal.aborted;
  const readyListeners = new Set<() => void>();
  let state: AuditLinkState = { status: "connecting", attempts: 0, lastError: undefined };
  let current: { readonly nc: NatsConnection; readonly publisher: NatsPublisher } | undefined;
  let drift: readonly AuditStreamDrift[] = [];

  const setState = (next: AuditLinkState): void => {
    if (state.status === "closed") return;
    state = next;
    options.onStateChange?.(next);
    if (next.status === "ready") for (const l of readyListeners) l();
  };

  /** Logs a failure unless the same one was logged within `repeatLogEveryMs`. */
  const report = (what: string, why: string, meta: Record<string, unknown>): void => {
    const r = limiter.admit(`${what}\n${why}`);
    if (r.log) log.warn(`${what}: ${why}`, { ...meta, err: why, ...(r.suppressed > 0 ? { repeatsSinceLastLog: r.suppressed } : {}) });
  };

  /** Waits out the backoff for failure number `attempt` (0-based); resolves early (no throw) on close. */
  const pause = async (attempt: number): Promise<void> => {
    await sleep(clock, backoffDelayMs(policy, attempt, rng), signal).catch(() => undefined);
  };

  /** Serves one connection until nats.js closes it for good (or the link closes); true if it was ever ready. */
  const serve = async (nc: NatsConnection): Promise<boolean> => {
    let connected = true;
    let wasReady = false;
    // Set by every ensure request; read through a function, as it changes across awaits.
    let again = false;
    const requestedAgain = (): boolean => again;
    let looping = false;
    let ensuring: Promise<void> = Promise.resolve();
    const live = (): boolean => connected && !signal.aborted && !nc.isClosed();

    const ensureLoop = async (): Promise<void> => {
      let attempts = 0;
      // The flag drops in the same tick as the last check of `again` (finally
      // of this very function, no await between), so no request is lost.
      try {
        while (live()) {
          again = false;
          try {
            const r = await checkAuditStream(nc, streamOptions, signal);
            // A reconnect while this ran may have reached a server without the stream: check that one too.
            if (requestedAgain()) continue;
            if (!live()) return;
            drift = r.drift;
            const dangerous = r.drift.filter((x) => x.dangerous);
            if (dangerous.length > 0) {
              throw new WardenError(Code.FailedPrecondition, `audit stream ${r.name} would not keep the events: ${describeAuditStreamDrift(dangerous)}; fix it with \`warden nats provision\` (events wait in the outbox)`);
            }
            if (r.drift.length > 0) {
              // Publishing goes on (the events still reach the stream), but someone changed what it keeps.
              log.warn("audit stream configuration drifted from what Warden needs; fix it with `warden nats provision`", { stream: r.name, drift: describeAuditStreamDrift(r.drift) });
            }
            if (r.action === "created") log.info("audit stream was missing; created it (no provisioning step ran)", { stream: r.name });
            log.info("audit stream ready", { stream: r.name, action: r.action, server: nc.getServer() });
            limiter.reset();
            wasReady = true;
            setState({ status: "ready", stream: r.name });
            return;
          } catch (err) {
            if (!live()) return;
            if (requestedAgain()) continue;
            const why = describeNatsError(err);
            attempts++;
            setState({ status: "ensuring-stream", attempts, lastError: why });
            report("cannot set up the audit stream; retrying", why, { stream: streamName, attempts });
            await pause(attempts - 1);
          }
        }
      } finally {
        looping = false;
      }
    };

    const ensure = (): void => {
      if (!live()) return;
      again = true;
      if (state.status !== "ensuring-stream") setState({ status: "ensuring-stream", attempts: 0, lastError: undefined });
      if (looping) return;
      looping = true;
      ensuring = ensureLoop();
    };

    const publisher = createNatsPublisher(nc, {
      ...options.publisher,
      streamName,
      onNoStream: () => {
        if (state.status !== "ready") return;
        log.warn("a publish found no audit stream; setting it up again", { stream: streamName });
        ensure();
      },
    });
    current = { nc, publisher };

    const watchStatus = async (): Promise<void> => {
      for await (const st of nc.status()) {
        switch (st.type) {
          case "disconnect":
            connected = false;
            log.warn("NATS connection lost; reconnecting", { server: st.server });
            setState({ status: "disconnected", server: st.server });
            break;
          case "reconnect":
            connected = true;
            log.info("NATS reconnected; confirming the audit stream again", { server: st.server });
            ensure();
            break;
          case "error":
            // e.g. an authorization violation while reconnecting with a revoked credential.
            report("NATS error", describeNatsError(st.error), { server: nc.getServer() });
            break;
          default:
            break;
        }
      }
    };
    const watching = watchStatus().catch(() => undefined);

    ensure();
    const closedBy = await nc.closed();
    connected = false;
    publisher.close();
    current = undefined;
    await watching;
    await ensuring;
    if (!closing()) {
      const why = closedBy === undefined ? "closed" : describeNatsError(closedBy);
      setState({ status: "connecting", attempts: 0, lastError: why });
      report("NATS connection closed for good; connecting again", why, { servers });
    }
    return wasReady;
  };

  const run = async (): Promise<void> => {
    // Failed tries since the link was last ready: the backoff step.
    let failures = 0;
    while (!closing()) {
      let nc: NatsConnection;
      try {
        nc = await connectAudit({ ...options.connection, waitOnFirstConnect: false }, signal);
      } catch (err) {
        if (closing()) return;
        const why = describeNatsError(err);
        failures++;
        setState({ status: "connecting", attempts: failures, lastError: why });
        report("cannot connect to NATS for the audit stream; retrying", why, { servers, attempts: failures });
        await pause(failures - 1);
        continue;
      }
      if (closing()) {
        await nc.close().catch(() => undefined);
        return;
      }
      log.info("connected to NATS", { server: nc.getServer() });
      // A connection that was up and then given up on starts the backoff over; one that never was continues it.
      failures = (await serve(nc)) ? 1 : failures + 1;
      if (!closing()) await pause(failures - 1);
    }
  };
  const running = run().catch((err: unknown) => {
    // Not expected (every step catches): say so rather than stop silently.
    log.error("audit link stopped", { err: describeNatsError(err) });
  });

  const publisher: Publisher = {
    publish(event, publishSignal) {
      const c = current;
      if (state.status === "ready" && c !== undefined) return c.publisher.publish(event, publishSignal);
      return Promise.reject(new WardenError(Code.Unavailable, `audit stream not ready: ${describeAuditLinkState(state)}`));
    },
    onReady(listener) {
      readyListeners.add(listener);
      return () => {
        readyListeners.delete(listener);
      };
    },
  };

  let closed: Promise<void> | undefined;
  return {
    publisher,
    state: () => state,
    connection: () => current?.nc,
    streamDrift: () => drift,
    close() {
      closed ??= (async () => {
        ctl.abort();
        readyListeners.clear();
        const c = current;
        c?.publisher.close();
        await c?.nc.close().catch(() => undefined);
        await running;
        setState({ status: "closed" });
      })();
      return closed;
    },
  };
}
