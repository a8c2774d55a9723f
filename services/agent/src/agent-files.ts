import { accessSync, constants, statSync } from "node:fs";
import { dirname, isAbsolute } from "node:path";
import { invalidArgument, readSecretFile } from "@warden/common";
import { readCaBundle } from "@warden/grpc";
import type { AgentConfig } from "./agent-config.js";
import { readRegistryAuthFile } from "./registry-auth.js";

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

/** The state dir must be writable by whoever runs (the service user), or the nearest existing parent, where the start makes it. Shared with the coordinator's check. */
export function writableDir(path: string, field: string): void {
  let p = path;
  for (;;) {
    try {
      accessSync(p, constants.W_OK | constants.X_OK);
      return;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== "ENOENT" || dirname(p) === p) throw invalidArgument(field, `cannot write ${path}${p === path ? "" : ` (nor create it in ${p})`}: ${code === "EACCES" ? "permission denied" : code === "ENOENT" ? "no such directory" : (err as Error).message}`);
      p = dirname(p);
    }
  }
}

/**
 * Every file the config names besides `tls` (main.ts reads that itself):
 * the state dir (writable), the backend and coordinator token files, the registry credentials
 * file (checked whole), the models directory, each
 * catalog executable and backend CA, and an absolute nvidiaSmi — checked as
 * the user running `--check-config` (systemd's ExecStartPre runs as the
 * service user), failing naming the field and the path.
 */
export function checkAgentFiles(config: AgentConfig, fieldPrefix = ""): void {
  const f = (name: string): string => `${fieldPrefix}${name}`;
  writableDir(config.stateDir, f("stateDir"));
  if (config.backendTokenFile !== "") readSecretFile(config.backendTokenFile, f("backendTokenFile"));
  if (config.coordinatorTokenFile !== "") readSecretFile(config.coordinatorTokenFile, f("coordinatorTokenFile"));
  if (config.registryAuthFile !== "") readRegistryAuthFile(config.registryAuthFile, f("registryAuthFile"));
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
