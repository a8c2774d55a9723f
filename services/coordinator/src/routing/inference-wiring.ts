import type { Clock, Logger } from "@warden/common";
import { LeanGrpcServer, guardRawUnary, type GrpcServer } from "@warden/grpc";
import type { Loader } from "@warden/loader";
import { Backend, InferenceService } from "@warden/proto";
import type { Authenticator } from "../auth/authenticator.js";
import { guarded } from "../auth/coordinator-auth.js";
import type { CoordinatorTransport } from "../auth/coordinator-transport.js";
import { inferenceStreamRule, revocableRawStreams, revocableStreams } from "../auth/revocable-streams.js";
import type { EventHub } from "../admin/event-hub.js";
import type { CoordinatorConfig } from "../config/coordinator-config.js";
import { serverLimits } from "../config/limits-config.js";
import type { RoutingAdmission } from "./admission-gate.js";
import type { BackendClientHandle } from "./backend-connector.js";
import { backendRouter } from "./backend-router.js";
import { routingAdmission } from "./caller-class.js";
import { inferenceService } from "./inference-service.js";
import { PrefixRouting } from "./prefix-routing.js";
import type { RoutedCallObserver, RoutedCounter } from "./routed-call.js";

/** What the coordinator keeps of its inference routes. */
export interface InferenceWiring {
  /** The routed-calls counter (per outcome), shared with the HTTP routes. */
  readonly routed: RoutedCounter;
  readonly prefixRouting: PrefixRouting;
  readonly admission: RoutingAdmission;
  /** The data-plane listener (`inferenceListen`), not listening yet; undefined when not configured. */
  readonly dataPlane: LeanGrpcServer | undefined;
  /** The counter the routed calls count into, once the metrics exist (calls before it are not counted). */
  countInto(counter: { labels(outcome: string): { inc(): void } }): void;
  /** A reloaded config: its models' `admission:` settings apply at the next call. */
  reload(next: CoordinatorConfig): void;
}

/**
 * Every way a call reaches a backend, on both ports: InferenceService
 * (guarded, streams revocable), LocalAI's backend.Backend routed as bytes
 * (with tokens, no caller may name a file on the node: backend-path-rules.ts),
 * and the data-plane listener with the same handlers. Prefix-affinity routing
 * and the admission gate sit in front of all of them (and of the HTTP
 * routes, which take them from here).
 */
export function wireInference(o: {
  readonly config: CoordinatorConfig;
  readonly loader: Loader<BackendClientHandle>;
  readonly clock: Clock;
  readonly hub: EventHub;
  readonly log: Logger;
  readonly authn: Authenticator | undefined;
  readonly server: GrpcServer;
  readonly transport: CoordinatorTransport;
  /** Told of every routed call when it ends (the workload trace); undefined = nobody. */
  readonly observer?: RoutedCallObserver | undefined;
  /** Completion tokens of gRPC Predict and PredictStream calls (the dashboard's tokens per second; the OpenAI routes count their own). */
  readonly onTokens?: (model: string, tokens: number) => void;
}): InferenceWiring {
  const { config, loader, authn, server } = o;
  // One labelled child per outcome, resolved once: `inc({ outcome })` would hash the labels on every routed call.
  const byOutcome = new Map<string, { inc(): void }>();
  let counter: { labels(outcome: string): { inc(): void } } | undefined;
  const routed: RoutedCounter = {
    inc: (outcome) => {
      let child = byOutcome.get(outcome);
      if (child === undefined) {
        if (counter === undefined) return;
        child = counter.labels(outcome);
        byOutcome.set(outcome, child);
      }
      child.inc();
    },
  };
  // Models with `routing: prefix` route by prompt prefix (prefix-routing.ts).
  const prefixRouting = new PrefixRouting(loader, o.clock).follow(o.hub);
  // Models with `admission:`: classes, fair sharing and shedding in front of routing (read per call: a reload applies at once).
  let admissionSettings = config.admission;
  const admission = routingAdmission({ settingsOf: (m) => admissionSettings.get(m), loader, authn });
  const inference = inferenceService(loader, o.log.child({ component: "inference" }), routed, authn === undefined ? undefined : (model, ctx, m) => { authn.checkModel(model, ctx, m); }, prefixRouting, admission, o.observer, o.onTokens);
  const inferenceGuarded = guarded(InferenceService, authn === undefined ? inference : revocableStreams(InferenceService, inference, authn, inferenceStreamRule), authn?.inference);
  server.add(InferenceService, inferenceGuarded);
  const routerImpl = backendRouter(loader, o.log.child({ component: "backend-router" }), routed, authn === undefined ? undefined : (model, ctx, m) => { authn.inference(m, ctx, undefined); authn.checkModel(model, ctx, m); }, authn === undefined ? "pass" : "refuse", prefixRouting, admission, o.observer);
  const router = authn === undefined ? routerImpl : revocableRawStreams(routerImpl, authn, inferenceStreamRule);
  server.addRawService(Backend, router);
  const dataPlane =
    config.inferenceListen === undefined
      ? undefined
      : new LeanGrpcServer({ ...o.transport.dataPlane, ...serverLimits(config.limits) })
          .add(InferenceService, inferenceGuarded)
          .addRawUnary(InferenceService.method.predict, authn === undefined ? inference.predictBytes : guardRawUnary(InferenceService.method.predict, inference.predictBytes, authn.inference))
          .addRawService(Backend, router);
  return {
    routed,
    prefixRouting,
    admission,
    dataPlane,
    countInto(c) {
      counter = c;
    },
    reload(next) {
      admissionSettings = next.admission;
    },
  };
}
