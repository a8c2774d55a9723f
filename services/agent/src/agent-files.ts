import { accessSync, constants, statSync } from "node:fs";
import { isAbsolute } from "node:path";
import { invalidArgument, readSecretFile } from "@warden/common";
import { readCaBundle } from "@warden/grpc";
import type { AgentConfig } from "./agent-config.js";

function errText(err: unknown): string {
  const code = (err as NodeJS.ErrnoException).code;
  return code === "ENOENT" ? "no such file" : code === "EACCES" ? "permission denied" : (err as Error).message;
}

function executable(path: string, field: string): void {
  try {
    accessSync(path, constants.X_OK);
  } catch (err) {
    throw invalidArgument(field, `cannot run ${path}: ${errText(err)}`);
  }
}

/**
 * Every file the config names besides `tls` (main.ts reads that itself):
 * the backend and coordinator token files, the models directory, each
 * catalog executable and backend CA, and an absolute nvidiaSmi — checked as
 * the user running `--check-config` (systemd's ExecStartPre runs as the
 * service user), failing naming the field and the path.
 */
export function checkAgentFiles(config: AgentConfig, fieldPrefix = ""): void {
  const f = (name: string): string => `${fieldPrefix}${name}`;
  if (config.backendTokenFile !== "") readSecretFile(config.backendTokenFile, f("backendTokenFile"));
  if (config.coordinatorTokenFile !== "") readSecretFile(config.coordinatorTokenFile, f("coordinatorTokenFile"));
  if (config.modelsPath !== undefined) {
    let dir: boolean;
    try {
      dir = statSync(config.modelsPath).isDirectory();
      accessSync(config.modelsPath, constants.R_OK | constants.X_OK);
    } catch (err) {
      throw invalidArgument(f("modelsPath"), `cannot read ${config.modelsPath}: ${errText(err)}`);
    }
    if (!dir) throw invalidArgument(f("modelsPath"), `${config.modelsPath} is not a directory`);
  }
  for (const [name, e] of Object.entries(config.catalog)) {
    executable(e.command, f(`catalog.${name}.command`));
    if (e.tls !== undefined) readCaBundle(e.tls.caFile, f(`catalog.${name}.tls.ca`));
  }
  if (config.nvidiaSmiPath !== "" && isAbsolute(config.nvidiaSmiPath)) executable(config.nvidiaSmiPath, f("nvidiaSmi"));
}
