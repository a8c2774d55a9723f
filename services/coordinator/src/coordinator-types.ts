import type { MessageInitShape } from "@bufbuild/protobuf";
import type { GetHaStatusResponseSchema } from "@warden/proto";
import type { GrpcServer } from "@warden/grpc";
import type { Clock, Logger, Rng } from "@warden/common";
import type { Loader } from "@warden/loader";
import type { Outbox } from "@warden/outbox";
import type { Agent } from "@warden/agent";
import type { CoordinatorConfig } from "./config/coordinator-config.js";
import type { BackendClientHandle } from "./routing/backend-connector.js";
import type { EventHub } from "./admin/event-hub.js";
import type { NodeRegistry } from "./nodes/node-registry.js";
import type { CoordinatorMetrics } from "./metrics.js";
import type { DashboardHa } from "./http/dashboard/dashboard-view.js";
import type { CoordinatorHaWiring } from "./ha/coordinator-ha-wiring.js";

// What startCoordinator takes and returns (coordinator.ts wires it).

export interface CoordinatorDeps {
  readonly clock?: Clock;
  readonly rng?: Rng;
  readonly logger?: Logger;
  /** One term of HA leadership (ha/coordinator-ha-wiring.ts); undefined = single machine. */
  readonly ha?: CoordinatorHaWiring;
  /** GetHaStatus's answer while leading (ha/ha-runner.ts). */
  readonly haStatus?: () => MessageInitShape<typeof GetHaStatusResponseSchema>;
  /** The HTTP listener's view of HA while leading (GET /ha/leader, /api/dashboard/ha). */
  readonly haView?: () => DashboardHa;
  /** Called once the HTTP app is built, right before it binds (an HA standby's listener releases the port then); not called without httpListen. */
  readonly beforeHttpListen?: () => Promise<void>;
}

/** A running coordinator (with its embedded agent in single-machine mode). */
export interface Coordinator {
  /** host:port of the Admin, Inference and Node services. */
  readonly address: string;
  readonly config: CoordinatorConfig;
  readonly loader: Loader<BackendClientHandle>;
  readonly nodes: NodeRegistry;
  readonly hub: EventHub;
  readonly outbox: Outbox;
  readonly server: GrpcServer;
  /** host:port of `/metrics`, when enabled. */
  readonly metricsAddress: string | undefined;
  /** The Prometheus registry (the HA runner serves it beside its own). */
  readonly metricsRegistry: CoordinatorMetrics["registry"];
  /** host:port of the lean InferenceService listener, when `inferenceListen` is set. */
  readonly inferenceAddress: string | undefined;
  /** host:port of the HTTP listener (OpenAI-compatible API), when `httpListen` is set. */
  readonly httpAddress: string | undefined;
  /** The embedded agent, when configured. */
  readonly agent: Agent | undefined;
  /** Applies a new config's models and policy live (SIGHUP). */
  reload(config: CoordinatorConfig): Promise<void>;
  /**
   * Stops serving. With `stopBackends` (what `warden up` does on Ctrl-C), the
   * embedded agent stops every backend it started, gracefully then by force.
   */
  close(options: { readonly stopBackends: boolean }): Promise<void>;
}
