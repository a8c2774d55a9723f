import { Backend } from "@warden/proto";
import { createH2Client, type H2Client } from "@warden/grpc";
import type { BackendConnector, BackendHandle } from "@warden/loader";

/** The coordinator's local half of a backend: a gRPC client on its address. */
export interface BackendClientHandle extends BackendHandle {
  readonly client: H2Client<typeof Backend>;
}

/**
 * The handle over one backend's client: routing only. The stop sequence's
 * Free is not sent from here: it goes through the node's agent
 * (AgentService.FreeBackend), whose leader-epoch fence judges it.
 */
export function backendHandle(client: H2Client<typeof Backend>): BackendClientHandle {
  return {
    client,
    close() {
      client.close();
    },
  };
}

/** Connects to backends over plaintext gRPC (LocalAI Backend protocol); coordinator-transport.ts adds TLS and the backends' bearer token where configured. */
export const grpcBackendConnector: BackendConnector<BackendClientHandle> = {
  connect(address: string): BackendClientHandle {
    // The hot proxy hop: a lean HTTP/2 client rather than a grpc-js channel (see createH2Client).
    return backendHandle(createH2Client(Backend, address));
  },
};
