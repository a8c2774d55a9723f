import { readFileSync } from "node:fs";
import { invalidArgument, readSecretFile } from "@warden/common";
import { readCaBundle, readTlsMaterial } from "@warden/grpc";
import { checkAgentFiles, writableDir } from "@warden/agent";
import { embeddedAgentConfig } from "../nodes/embedded-node.js";
import type { CoordinatorConfig } from "./coordinator-config.js";

/** A file the config names must be readable by whoever runs the check (under systemd: the service user). */
function readable(path: string, field: string): void {
  try {
    readFileSync(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw invalidArgument(field, `cannot read ${path}: ${code === "ENOENT" ? "no such file" : code === "EACCES" ? "permission denied" : (err as Error).message}`);
  }
}

/**
 * Checks the state dir is writable and reads every file the config names — TLS certificate, key and CA, the
 * backend TLS files, the tokens file, the backend token file, the NATS creds
 * file, and the embedded agent's (agent.modelsPath, agent.catalog.…) — as the start would, so `--check-config` (systemd's ExecStartPre,
 * run as the service user) fails naming the first missing or unreadable one
 * instead of calling the config valid and the start looping.
 */
export function checkCoordinatorFiles(config: CoordinatorConfig): void {
  writableDir(config.stateDir, "stateDir");
  if (config.tls !== undefined) readTlsMaterial(config.tls, "tls");
  const b = config.backendTls;
  if (b !== undefined) {
    readCaBundle(b.caFile, "backendTls.ca");
    if (b.certFile !== undefined && b.keyFile !== undefined) readTlsMaterial({ certFile: b.certFile, keyFile: b.keyFile }, "backendTls");
  }
  if (config.auth.tokensFile !== undefined) readable(config.auth.tokensFile, "auth.tokensFile");
  if (config.auth.backendTokenFile !== undefined) readSecretFile(config.auth.backendTokenFile, "auth.backendTokenFile");
  if (config.nats?.credsFile !== undefined) readable(config.nats.credsFile, "nats.credsFile");
  if (config.embeddedAgent) checkAgentFiles(embeddedAgentConfig(config), "agent.");
}
