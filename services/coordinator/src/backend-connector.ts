import { Backend } from "@warden/proto";
import { createH2Client, type H2Client, type H2ClientOptions } from "@warden/grpc";
import type { BackendConnector, BackendHandle } from "@warden/loader";

/** The coordinator's local half of a backend: a gRPC client on its address. */
export interface BackendClientHandle extends BackendHandle {
  readonly client: H2Client<typeof Backend>;
}

/** Connects to backends over gRPC (LocalAI Backend protocol), with the coordinator's message limits. */
export function grpcBackendConnectorWith(options: H2ClientOptions): BackendConnector<BackendClientHandle> {
  return {
    connect: (address) => connectBackend(address, options),
  };
}

/** Connects to backends over gRPC (LocalAI Backend protocol). */
export const grpcBackendConnector: BackendConnector<BackendClientHandle> = grpcBackendConnectorWith({});

function connectBackend(address: string, options: H2ClientOptions): BackendClientHandle {
  {
    // The hot proxy hop: a lean HTTP/2 client rather than a grpc-js channel (see createH2Client).
    const client = createH2Client(Backend, address, options);
    return {
      client,
      async free(options) {
        const r = await client.free({}, { signal: options.signal, timeoutMs: options.timeoutMs });
        if (!r.success && r.message !== "") throw new Error(`Free: ${r.message}`);
      },
      close() {
        client.close();
      },
    };
  }
}
