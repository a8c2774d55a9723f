import { open } from "node:fs/promises";
import { setImmediate as nextTurn } from "node:timers/promises";
import type { DescService } from "@bufbuild/protobuf";
import { invalidArgument, readSecretFile, type Logger } from "@warden/common";
import { bearerMetadata, guardService, type CallCheck, type ServiceImpl } from "@warden/grpc";
import type { AuthConfig } from "./auth-config.js";
import { Authenticator } from "./authenticator.js";
import { TokenTable, tokenFileLimits } from "./token-table.js";

/** What the coordinator's wiring needs from `auth:`. */
export interface CoordinatorAuth {
  /** undefined = auth off (no tokens file). */
  readonly authenticator: Authenticator | undefined;
  /** Headers for every call to a backend (the shared backend token), when configured. */
  readonly backendHeaders: Readonly<Record<string, string>> | undefined;
}

/**
 * Lines parsed between two turns of the event loop when a tokens file is
 * read: a few milliseconds of parse on the 2-core build machine, where a
 * whole 65 536-token file takes 300–400 ms (`npm run bench -- tokens-file`).
 */
const linesPerTurn = 1024;

/**
 * Reads and parses a tokens file; refused whole on any bad line. The size is
 * checked before the read (a file far past the bound is never read into
 * memory), and the parse gives the event loop a turn every `linesPerTurn`
 * lines, so a reload (SIGHUP) of a large file never holds calls back for the
 * whole parse. The running table stays until this resolves.
 */
export async function readTokenTable(path: string, field = "auth.tokensFile"): Promise<TokenTable> {
  const maxBytes = tokenFileLimits.maxBytes;
  let text = "";
  let size: number;
  try {
    const h = await open(path, "r");
    try {
      size = (await h.stat()).size;
      if (size <= maxBytes) text = await h.readFile("utf8");
    } finally {
      await h.close();
    }
  } catch (err) {
    throw invalidArgument(field, `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? "error"}`);
  }
  if (size > maxBytes) throw invalidArgument(field, `at most ${String(maxBytes)} bytes, ${path} has ${String(size)}`);
  const steps = TokenTable.parseSteps(text, field, linesPerTurn);
  for (let r = steps.next(); ; r = steps.next()) {
    if (r.done === true) return r.value;
    await nextTurn();
  }
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
