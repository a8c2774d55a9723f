import { readSecretFile } from "@warden/common";
import { bearerMetadata } from "@warden/grpc";
import type { AgentConfig } from "./agent-config.js";
import type { BackendAuth } from "./agent-context.js";

/** The env var LocalAI's backends read their bearer token from (pkg/grpc/server.go AuthTokenEnvVar). */
export const backendTokenEnvVar = "LOCALAI_GRPC_AUTH_TOKEN";

/** The backends' shared token from `backendTokenFile`; undefined when none is configured. */
export function backendAuthOf(config: Pick<AgentConfig, "backendTokenFile">): BackendAuth | undefined {
  if (config.backendTokenFile === "") return undefined;
  const token = readSecretFile(config.backendTokenFile, "backendTokenFile");
  return { env: { [backendTokenEnvVar]: token }, headers: bearerMetadata(token) };
}
