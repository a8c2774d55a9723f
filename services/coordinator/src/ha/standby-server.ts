import type { DescService, MessageInitShape } from "@bufbuild/protobuf";
import { AdminService, Backend, InferenceService, NodeService, type GetHaStatusResponseSchema } from "@warden/proto";
import { GrpcServer, ServingStatus, type RawServiceHandlers, type ServiceImpl } from "@warden/grpc";
import { notLeaderError, type Logger, type WardenError } from "@warden/common";
import type { CoordinatorConfig } from "../config/coordinator-config.js";
import { coordinatorTransport } from "../auth/coordinator-transport.js";
import { guarded, loadCoordinatorAuth } from "../auth/coordinator-auth.js";
import { clientLimits, serverLimits } from "../config/limits-config.js";

/** The health service name every HA member reports: SERVING while it reaches NATS (and, on the leader, holds quorum). */
export const haHealthService = "warden.ha";

/** What a standby answers: the leader's address when it knows one. */
export type RefusalSource = () => WardenError;

/** Every method of `svc` refused with `refuse()`, by its kind (a generator throws on its first pull). */
function refusingImpl<T extends DescService>(svc: T, refuse: RefusalSource): ServiceImpl<T> {
  const impl: Record<string, unknown> = {};
  for (const m of svc.methods) {
    impl[m.localName] =
      m.methodKind === "unary" || m.methodKind === "client_streaming"
        ? () => Promise.reject(refuse())
        : // eslint-disable-next-line require-yield -- refuses before its first message
          async function* () {
            throw refuse();
          };
  }
  return impl as ServiceImpl<T>;
}

function refusingRaw(refuse: RefusalSource): RawServiceHandlers {
  return {
    unary: () => () => Promise.reject(refuse()),
    serverStream: () =>
      // eslint-disable-next-line require-yield -- refuses before its first message
      async function* () {
        throw refuse();
      },
    stream: () =>
      // eslint-disable-next-line require-yield -- refuses before its first message
      async function* () {
        throw refuse();
      },
  };
}

export interface StandbyServer {
  readonly address: string;
  /** Sets "warden.ha" SERVING or NOT_SERVING (reaches NATS or not). */
  setHaServing(serving: boolean): void;
  close(): Promise<void>;
}

/**
 * The standby's gRPC server on the coordinator's `listen` address:
 * every Admin, Inference, Node and raw backend.Backend call is refused with
 * `notLeaderError(leaderAddress)`, except AdminService.GetHaStatus (behind the
 * viewer role when auth is on) and grpc.health, where every `warden.*`
 * service is NOT_SERVING and "warden.ha" says whether this member reaches NATS.
 * Same TLS and tokens as the coordinator.
 */
export async function startStandbyServer(o: {
  readonly config: CoordinatorConfig;
  readonly leaderAddress: () => string | undefined;
  readonly status: () => MessageInitShape<typeof GetHaStatusResponseSchema>;
  readonly haServing: boolean;
  readonly log: Logger;
}): Promise<StandbyServer> {
  const c = o.config;
  const auth = await loadCoordinatorAuth(c.auth, [c.listen], o.log.child({ component: "auth" }));
  const transport = coordinatorTransport(c, auth.backendHeaders, clientLimits(c.limits));
  const server = new GrpcServer({ ...transport.controlPlane, ...serverLimits(c.limits) });
  const refuse: RefusalSource = () => notLeaderError(o.leaderAddress());
  const admin = refusingImpl(AdminService, refuse);
  admin.getHaStatus = () => Promise.resolve(o.status());
  const authn = auth.authenticator;
  server.add(AdminService, guarded(AdminService, admin, authn?.admin));
  server.add(InferenceService, refusingImpl(InferenceService, refuse));
  server.add(NodeService, refusingImpl(NodeService, refuse));
  server.addRawService(Backend, refusingRaw(refuse));
  for (const svc of [AdminService, InferenceService, NodeService, Backend]) server.health.set(svc.typeName, ServingStatus.NOT_SERVING);
  server.health.set(haHealthService, o.haServing ? ServingStatus.SERVING : ServingStatus.NOT_SERVING);
  const { address } = await server.listen(c.listen);
  // Overall "" status: this member serves (as a standby); the per-service statuses say what.
  for (const svc of [AdminService, InferenceService, NodeService, Backend]) server.health.set(svc.typeName, ServingStatus.NOT_SERVING);
  return {
    address,
    setHaServing(serving) {
      server.health.set(haHealthService, serving ? ServingStatus.SERVING : ServingStatus.NOT_SERVING);
    },
    async close() {
      await server.shutdown(1_000);
    },
  };
}
