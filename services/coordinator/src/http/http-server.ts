import type { SecureContextOptions } from "node:tls";
import { fastify, type FastifyError, type FastifyInstance, type FastifyReply } from "fastify";
import { Code, WardenError, type Logger } from "@warden/common";
import { capConnections, checkPlaintextListen } from "@warden/grpc";
import type { HttpLimits } from "./http-settings.js";
import { errorBody, httpStatusOf, retryAfterOf } from "./openai-errors.js";
import { answerUnparsedRequest, requestError } from "./client-errors.js";
import { acceptedHosts, hostCheckHook } from "./host-check.js";
import { installSecurityHeaders } from "./security-headers.js";

/** Plugs routes into the listener: the OpenAI API, the dashboard, … (each module its own registrar). */
export type HttpRouteRegistrar = (app: FastifyInstance) => void | Promise<void>;

export interface HttpServerOptions {
  /** host:port; port 0 picks a free one. */
  readonly listen: string;
  readonly limits: HttpLimits;
  /** Serve HTTPS with this certificate (the coordinator's `tls.cert`/`tls.key`); undefined = plaintext. */
  readonly tls: { readonly cert: Buffer; readonly key: Buffer } | undefined;
  /** Allow plaintext on a non-loopback address (the coordinator's `insecure`). */
  readonly insecure: boolean;
  /** Auth is off: refuse a request whose Host is not a loopback name, the listen host or `limits.allowedHosts` (host-check.ts). */
  readonly checkHost: boolean;
  readonly routes: readonly HttpRouteRegistrar[];
  readonly log: Logger;
  /**
   * Runs once every route is registered and the app is ready, right before
   * it binds. HA: a member taking the lead closes its standby listener on the
   * same port here, so the port goes unanswered only for as long as the bind
   * takes — not while the whole app is built (a page loading its script across
   * the switch gets a refused or cut request; the page tries again, see
   * dashboard-page.ts, but the shorter the gap the fewer such retries).
   */
  readonly beforeListen?: () => Promise<void>;
}

export interface HttpServer {
  /** host:port actually bound. */
  readonly address: string;
  /** Swaps the certificate in place (SIGHUP); new connections use it. */
  updateTls(tls: { readonly cert: Buffer; readonly key: Buffer }): void;
  /** Stops accepting, ends open calls (their signals abort) and closes every connection. */
  close(): Promise<void>;
}

/**
 * An AbortSignal for one HTTP call: aborted when the client goes away before
 * the reply finished (a closed tab, a cancelled stream), when the server
 * closes, or after `timeoutMs`. The timer is cleared once the reply ends,
 * so a finished call holds nothing.
 */
export function callSignal(reply: FastifyReply, timeoutMs: number): AbortSignal {
  const ctl = new AbortController();
  const timer = setTimeout(() => {
    ctl.abort(new WardenError(Code.DeadlineExceeded, `the call took longer than http.callTimeout (${String(timeoutMs)}ms)`));
  }, timeoutMs);
  timer.unref();
  reply.raw.once("close", () => {
    clearTimeout(timer);
    if (!reply.raw.writableFinished) ctl.abort(new WardenError(Code.Canceled, "the client closed the connection"));
  });
  return ctl.signal;
}

function hostPort(address: string): { host: string; port: number } {
  const colon = address.lastIndexOf(":");
  const host = address.slice(0, colon).replace(/^\[(.*)\]$/, "$1");
  const port = Number(address.slice(colon + 1));
  if (colon <= 0 || !Number.isInteger(port) || port < 0 || port > 65_535) throw new WardenError(Code.InvalidArgument, `httpListen "${address}" is not host:port`, { details: { field: "httpListen" } });
  return { host, port };
}

/**
 * Starts the coordinator's HTTP listener: fastify with its own logger off
 * (errors go to the coordinator's redacting logger), every error in
 * OpenAI's JSON shape, bounded bodies and timeouts (http-settings.ts), and
 * the same plaintext guard as the gRPC listeners: plaintext only on
 * loopback unless `insecure`. Routes come from registrars, so a module adds
 * its endpoints without editing this file.
 */
export async function startHttpServer(o: HttpServerOptions): Promise<HttpServer> {
  const { host, port } = hostPort(o.listen);
  try {
    checkPlaintextListen(o.listen, { tls: o.tls !== undefined, insecure: o.insecure });
  } catch (err) {
    const e = WardenError.from(err);
    throw new WardenError(e.code, e.rawMessage.replace(/^refusing to listen on/, "refusing to serve HTTP on"), { details: { field: "httpListen" } });
  }
  const l = o.limits;
  const app = fastify({
    logger: false,
    bodyLimit: l.bodyLimitBytes,
    requestTimeout: l.requestTimeoutMs,
    keepAliveTimeout: l.keepAliveTimeoutMs,
    connectionTimeout: l.connectionTimeoutMs,
    // Streams that never end by themselves (SSE) must not hold close() up.
    forceCloseConnections: true,
    return503OnClosing: true,
    clientErrorHandler: (err, socket) => {
      answerUnparsedRequest(err, socket, o.tls !== undefined);
    },
    // A missing Host is refused by host-check.ts (with the security headers), not by Node before any handler runs.
    ...(o.tls === undefined ? { http: { requireHostHeader: false } } : { https: { cert: o.tls.cert, key: o.tls.key, minVersion: "TLSv1.2" as const, requireHostHeader: false, handshakeTimeout: l.handshakeTimeoutMs } }),
  }) as unknown as FastifyInstance;
  app.server.maxConnections = l.maxConnections;
  app.server.headersTimeout = l.headersTimeoutMs;
  // Per IP, on accept: idle or slow sockets from one peer fill its own quota, not the listener's.
  capConnections(app.server, l);
  // First, so that every response (errors, 404s, streams) has them and a bad Host is refused before any route runs.
  installSecurityHeaders(app.server, o.tls !== undefined);
  app.addHook("onRequest", hostCheckHook({ enabled: () => o.checkHost, accepted: acceptedHosts(o.listen, l.allowedHosts) }));
  app.setErrorHandler((err: FastifyError, request, reply) => {
    const e = requestError(err);
    const status = httpStatusOf(e);
    if (status >= 500) o.log.error("http call failed", { method: request.method, path: request.url.split("?")[0], status, error: e.rawMessage });
    if (reply.sent || reply.raw.headersSent) {
      reply.raw.destroy();
      return;
    }
    const retryAfterS = retryAfterOf(e);
    if (retryAfterS !== undefined) void reply.header("retry-after", String(retryAfterS));
    void reply.code(status).type("application/json").send(errorBody(e));
  });
  app.setNotFoundHandler((request, reply) => {
    void reply.code(404).type("application/json").send(errorBody(new WardenError(Code.NotFound, `no route for ${request.method} ${request.url.split("?")[0] ?? ""}`, { details: { field: "url" } })));
  });
  for (const register of o.routes) await register(app);
  try {
    await app.ready();
    await o.beforeListen?.();
  } catch (err) {
    await app.close().catch(() => undefined);
    throw err;
  }
  let bound: string;
  try {
    bound = await app.listen({ host, port });
  } catch (err) {
    await app.close().catch(() => undefined);
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === "EADDRINUSE" ? "address already in use (choose another with --http or httpListen, or --http off)" : code === "EACCES" ? "permission denied" : err instanceof Error ? err.message : String(err);
    throw new WardenError(Code.FailedPrecondition, `httpListen: cannot serve HTTP on ${o.listen}: ${why}`, { cause: err, details: { field: "httpListen" } });
  }
  const a = app.server.address();
  const address = a !== null && typeof a === "object" ? `${a.family === "IPv6" ? `[${a.address}]` : a.address}:${String(a.port)}` : bound;
  let closed: Promise<void> | undefined;
  return {
    address,
    updateTls(tls) {
      if (o.tls === undefined) return;
      (app.server as unknown as { setSecureContext(o: SecureContextOptions): void }).setSecureContext({ cert: tls.cert, key: tls.key });
    },
    close() {
      closed ??= app.close();
      return closed;
    },
  };
}
