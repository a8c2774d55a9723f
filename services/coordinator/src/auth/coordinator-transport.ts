import { AgentService, Backend } from "@warden/proto";
import { ReloadableServerCredentials, clientTlsOf, expectNodeCertificate, createClient, createH2Client, readCaBundle, readTlsMaterial, type LeanGrpcServer, type ClientTls, type CreateServerOptions, type LeanServerOptions, type TlsMaterial } from "@warden/grpc";
import type { BackendConnector, ModelSpec } from "@warden/loader";
import { backendHandle, type BackendClientHandle } from "../routing/backend-connector.js";
import type { AgentClient } from "../nodes/grpc-agent-connector.js";
import { agentAddressProbe, type AgentAddressProbe } from "./agent-address-probe.js";
import { nodeBoundAgentClient } from "../nodes/node-bound-agent-client.js";
import type { BackendTlsConfig, TlsSettings } from "./tls-settings.js";

/**
 * The coordinator's TLS, built from its config: the control-plane server's
 * credentials, the data plane's certificate, the clients it dials agents and
 * backends with, and a reload that swaps certificates in place (SIGHUP).
 */
export interface CoordinatorTransport {
  /** Options for the control-plane GrpcServer (Admin, Inference, Node). */
  readonly controlPlane: CreateServerOptions;
  /** Options for the data-plane LeanGrpcServer (Inference only). */
  readonly dataPlane: LeanServerOptions;
  /** The data-plane server built with `dataPlane`, so a reload replaces its certificate too. */
  attachDataPlane(server: LeanGrpcServer): void;
  /** True when agents must present a certificate the configured CA signed (tls.ca). */
  readonly mutual: boolean;
  /**
   * An AgentService client for node `nodeId`'s agent at `address`, with the
   * certificates current at the call. Under mutual TLS every connection it
   * opens (the first and each reconnect) must present a certificate naming
   * `nodeId`, or no request goes out: the call fails PERMISSION_DENIED.
   */
  connectAgent(address: string, nodeId: string): AgentClient;
  /** Under mutual TLS, Register's check that `address` serves node `nodeId`'s certificate; undefined otherwise. */
  readonly probeAgentAddress: AgentAddressProbe | undefined;
  readonly backends: BackendConnector<BackendClientHandle>;
  /**
   * Reads and checks `next`'s certificate files whole and returns how to
   * apply them (nothing changes until then; a broken file throws here).
   */
  prepareReload(next: TlsSettings & { readonly models: readonly ModelSpec[] }): () => void;
}

interface BackendTls {
  readonly config: BackendTlsConfig;
  readonly client: ClientTls;
}

function backendTlsOf(c: BackendTlsConfig | undefined): BackendTls | undefined {
  if (c === undefined) return undefined;
  const ca = readCaBundle(c.caFile, "backendTls.ca");
  const own = c.certFile === undefined || c.keyFile === undefined ? undefined : readTlsMaterial({ certFile: c.certFile, keyFile: c.keyFile }, "backendTls");
  return { config: c, client: { ca, ...(own === undefined ? {} : { cert: own.cert, key: own.key }), ...(c.serverName === undefined ? {} : { serverName: c.serverName }) } };
}

/** A model's catalog backend name, by model id. */
function backendNames(models: readonly ModelSpec[]): Map<string, string> {
  return new Map(models.map((m) => [m.id, m.backend]));
}

/** `backendHeaders`: metadata sent on every backend call (the backends' shared bearer token), when configured; `clientLimits`: message caps of every agent and backend client. */
export function coordinatorTransport(config: TlsSettings & { readonly models: readonly ModelSpec[] }, backendHeaders?: Readonly<Record<string, string>>, clientLimits: { readonly maxReceiveMessageBytes?: number; readonly maxSendMessageBytes?: number } = {}): CoordinatorTransport {
  const first = config.tls === undefined ? undefined : readTlsMaterial(config.tls, "tls");
  let material: TlsMaterial | undefined = first;
  let backendTls = backendTlsOf(config.backendTls);
  let backendOf = backendNames(config.models);
  const credentials = first === undefined ? undefined : new ReloadableServerCredentials(first);
  // Inference clients are applications, not agents: the data plane serves TLS
  // without asking for a client certificate (tokens authenticate them).
  const dataPlane: LeanServerOptions = { insecure: config.insecure, ...(first === undefined ? {} : { tls: { cert: first.cert, key: first.key } }) };
  let dataPlaneServer: LeanGrpcServer | undefined;
  return {
    controlPlane: { insecure: config.insecure, ...(credentials === undefined ? {} : { credentials }) },
    dataPlane,
    attachDataPlane(server) {
      dataPlaneServer = server;
    },
    mutual: first?.ca !== undefined,
    connectAgent(address, nodeId) {
      if (material?.ca === undefined) return createClient(AgentService, address, { ...clientLimits, ...(material === undefined ? {} : { tls: clientTlsOf(material) }) });
      return nodeBoundAgentClient(createClient(AgentService, address, { ...clientLimits, tls: { ...clientTlsOf(material), verify: expectNodeCertificate(nodeId, address) } }), nodeId, address);
    },
    probeAgentAddress: first?.ca === undefined ? undefined : agentAddressProbe(() => clientTlsOf(material ?? first)),
    backends: {
      connect(address, target) {
        const b = backendTls;
        const tls = b !== undefined && target !== undefined && (b.config.nodes.includes(target.nodeId) || b.config.backends.includes(backendOf.get(target.model) ?? "")) ? b.client : undefined;
        // The hot proxy hop: a lean HTTP/2 client rather than a grpc-js channel (see createH2Client).
        return backendHandle(createH2Client(Backend, address, { ...clientLimits, ...(tls === undefined ? {} : { tls }), ...(backendHeaders === undefined ? {} : { headers: backendHeaders }) }));
      },
    },
    prepareReload(next) {
      if ((next.tls === undefined) !== (config.tls === undefined) || (next.tls?.caFile === undefined) !== (config.tls?.caFile === undefined)) {
        throw new Error("tls: turning TLS or mutual TLS on or off needs a restart; certificate files can be replaced and reloaded");
      }
      const m = next.tls === undefined ? undefined : readTlsMaterial(next.tls, "tls");
      const b = backendTlsOf(next.backendTls);
      const names = backendNames(next.models);
      return () => {
        if (m !== undefined) {
          credentials?.update(m);
          dataPlaneServer?.updateTls({ cert: m.cert, key: m.key });
          material = m;
        }
        backendTls = b;
        backendOf = names;
      };
    },
  };
}
