import { mkdir, rm } from "node:fs/promises";
import type { CallActivity } from "./dashboard/call-activity.js";
import type { AdminService } from "@warden/proto";
import type { ServiceImpl } from "@warden/grpc";
import { readTlsMaterial } from "@warden/grpc";
import type { Clock, Logger } from "@warden/common";
import type { Loader } from "@warden/loader";
import type { BackendClientHandle } from "../routing/backend-connector.js";
import type { Authenticator } from "../auth/authenticator.js";
import type { AdmissionGate } from "../routing/admission-gate.js";
import type { RoutedCallObserver } from "../routing/routed-call.js";
import type { CoordinatorConfig } from "../config/coordinator-config.js";
import type { EventHub } from "../admin/event-hub.js";
import type { NodeRegistry } from "../nodes/node-registry.js";
import type { RoutedCounter } from "../routing/routed-call.js";
import { HttpAuth } from "./http-auth.js";
import { startHttpServer, type HttpRouteRegistrar, type HttpServer } from "./http-server.js";
import { openAiRoutes } from "./openai-routes.js";
import { dashboardRoutes } from "./dashboard/dashboard-routes.js";
import type { DashboardHa } from "./dashboard/dashboard-view.js";
import { haRoutes } from "./ha-routes.js";
import { authenticateFirst } from "./auth-first.js";
import { routeRoles } from "./route-roles.js";

/** What routes on the coordinator's HTTP listener may use: its live state, in process. */
import type { PrefixRouting } from "../routing/prefix-routing.js";

export interface CoordinatorHttpContext {
  readonly config: () => CoordinatorConfig;
  readonly clock: Clock;
  readonly loader: Loader<BackendClientHandle>;
  readonly nodes: NodeRegistry;
  readonly hub: EventHub;
  /** The Admin API's implementation, unguarded: call it after `auth.requireRole`. */
  readonly admin: ServiceImpl<typeof AdminService>;
  readonly auth: HttpAuth;
  /** The routed-calls counter the gRPC routes count into. */
  readonly routed: RoutedCounter;
  /** Per-model admission (classes, fair sharing, shedding), shared with the gRPC routes. */
  readonly gate?: AdmissionGate;
  /** Told of every routed call when it ends (the workload trace). */
  readonly callObserver?: RoutedCallObserver | undefined;
  /** Ids for completions (chatcmpl-…). */
  readonly newId: () => string;
  /** Where uploads and files backends write (audio, images) live while a call runs. */
  readonly filesDir: string;
  /** The embedded agent's node id (whose backends share this machine's files), if any. */
  readonly localNodeId: string | undefined;
  /** With `ha:`: which member this is and who leads (GET /ha/leader, /api/dashboard/ha). */
  readonly haView?: () => DashboardHa;
  readonly log: Logger;
  /** Prefix-affinity routing for models configured `routing: prefix` (routing/prefix-routing.ts), shared with the gRPC routes. */
  readonly prefixRouting?: PrefixRouting;
  /** Routed calls as they begin and end (the dashboard's busy state and metrics); absent = none pushed. */
  readonly calls?: CallActivity;
}

/** Each module that serves on the HTTP listener: one registrar each (the dashboard adds its own here). */
function registrars(ctx: CoordinatorHttpContext, authn: Authenticator | undefined): HttpRouteRegistrar[] {
  // A known token before anything else (auth-first.ts: 401 and close, no body read), then route roles: their hooks must cover every route registered after them.
  return [authenticateFirst(ctx.auth), routeRoles(ctx.auth, authn, ctx.log), openAiRoutes(ctx), dashboardRoutes(ctx), haRoutes({ haView: ctx.haView, auth: ctx.auth })];
}

export interface CoordinatorHttp {
  readonly server: HttpServer;
  /** Applies a reloaded config: the certificate (prompt templates are read per call through `config`). */
  reload(next: CoordinatorConfig): void;
}

/** Starts the HTTP listener when `httpListen` is set; undefined when off. */
export async function startCoordinatorHttp(ctx: Omit<CoordinatorHttpContext, "auth"> & { readonly authenticator: Authenticator | undefined; readonly beforeListen?: (() => Promise<void>) | undefined }): Promise<CoordinatorHttp | undefined> {
  const config = ctx.config();
  if (config.httpListen === undefined) return undefined;
  const full: CoordinatorHttpContext = { ...ctx, auth: new HttpAuth(ctx.authenticator, ctx.log.child({ component: "http-auth" })) };
  const tls = config.tls === undefined ? undefined : readTlsMaterial(config.tls, "tls");
  // Files of calls a previous process did not finish (it stopped mid-call) go first.
  await rm(ctx.filesDir, { recursive: true, force: true });
  await mkdir(ctx.filesDir, { recursive: true, mode: 0o700 });
  const server = await startHttpServer({
    listen: config.httpListen,
    limits: config.http,
    tls: tls === undefined ? undefined : { cert: tls.cert, key: tls.key },
    insecure: config.insecure,
    checkHost: !full.auth.enabled,
    routes: registrars(full, ctx.authenticator),
    log: ctx.log,
    ...(ctx.beforeListen === undefined ? {} : { beforeListen: ctx.beforeListen }),
  });
  return {
    server,
    reload(next) {
      if (next.tls !== undefined) {
        const m = readTlsMaterial(next.tls, "tls");
        server.updateTls({ cert: m.cert, key: m.key });
      }
    },
  };
}
