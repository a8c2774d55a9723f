import { Backend } from "@warden/proto";
import { createH2Client, type H2Client } from "@warden/grpc";
import type { BackendConnector, BackendHandle } from "@warden/loader";

/** The coordinator's local half of a backend: a gRPC client on its address. */
export interface BackendClientHandle extends BackendHandle {
  readonly client: H2Client<typeof Backend>;
}

/** Connects to backends over gRPC (LocalAI Backend protocol), sending `headers` (the backends' bearer token) on every call when set. */
export function grpcBackendConnectorWith(headers: Readonly<Record<string, string>> | undefined): BackendConnector<BackendClientHandle> {
  return {
  connect(address: string): BackendClientHandle {
    // The hot proxy hop: a lean HTTP/2 client rather than a grpc-js channel (see createH2Client).
    const client = createH2Client(Backend, address, headers === undefined ? {} : { headers });
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
  },
  };
}

/** Connects to backends over gRPC without a token. */
export const grpcBackendConnector: BackendConnector<BackendClientHandle> = grpcBackendConnectorWith(undefined);
