import { readFile } from "node:fs/promises";
import type { DescService } from "@bufbuild/protobuf";
import { invalidArgument, readSecretFile, type Logger } from "@warden/common";
import { bearerMetadata, guardService, type CallCheck, type ServiceImpl } from "@warden/grpc";
import type { AuthConfig } from "./auth-config.js";
import { Authenticator } from "./authenticator.js";
import { TokenTable } from "./token-table.js";

/** What the coordinator's wiring needs from `auth:`. */
export interface CoordinatorAuth {
  /** undefined = auth off (no tokens file). */
  readonly authenticator: Authenticator | undefined;
  /** Headers for every call to a backend (the shared backend token), when configured. */
  readonly backendHeaders: Readonly<Record<string, string>> | undefined;
}

/** Reads and parses a tokens file; refused whole on any bad line. */
export async function readTokenTable(path: string, field = "auth.tokensFile"): Promise<TokenTable> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    throw invalidArgument(field, `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? "error"}`);
  }
  return TokenTable.parse(text, field);
}

function isLoopback(listen: string): boolean {
  const host = listen.slice(0, listen.lastIndexOf(":")).replace(/^\[(.*)\]$/, "$1");
  return host === "localhost" || host === "::1" || host.startsWith("127.");
}

/** Loads `auth:` at start; says so when a non-loopback listener runs without tokens. */
export async function loadCoordinatorAuth(config: AuthConfig, listens: readonly (string | undefined)[], log: Logger): Promise<CoordinatorAuth> {
  const backendHeaders = config.backendTokenFile === undefined ? undefined : bearerMetadata(readSecretFile(config.backendTokenFile, "auth.backendTokenFile"));
  if (config.tokensFile === undefined) {
    const open = listens.filter((l): l is string => l !== undefined && !isLoopback(l));
    if (open.length > 0) log.warn("auth is off: anyone who reaches these addresses can load, stop and call models and register as a node; set auth.tokensFile", { addresses: open });
    return { authenticator: undefined, backendHeaders };
  }
  const table = await readTokenTable(config.tokensFile);
  log.info("auth on", { tokens: table.size, backendToken: backendHeaders !== undefined });
  return { authenticator: new Authenticator(table, log), backendHeaders };
}

/** `impl` behind `check` when auth is on; as is when off. */
export function guarded<T extends DescService>(svc: T, impl: ServiceImpl<T>, check: CallCheck | undefined): ServiceImpl<T> {
  return check === undefined ? impl : guardService(svc, impl, check);
}
