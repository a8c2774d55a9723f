import { invalidArgument } from "@warden/common";

/**
 * The coordinator's `auth:` section. Off (both undefined) by default: the
 * single-machine setup (`warden up`, the embedded agent in process, loopback
 * only) needs no token. With `tokensFile`, every Admin, Inference (both
 * listeners) and Node call needs a bearer token from it.
 */
export interface AuthConfig {
  /**
   * Hashed bearer tokens and their roles, one per line (token-table.ts):
   * `sha256:<hex> <viewer|operator|admin|inference|node> [node=<id>] [models=<a,b>] [name=<label>]`.
   * Re-read on SIGHUP. undefined = auth off.
   */
  readonly tokensFile: string | undefined;
  /**
   * File holding the backends' shared bearer token: sent on every call to a
   * backend, and given by the embedded agent to the backends it starts as
   * LOCALAI_GRPC_AUTH_TOKEN (remote agents: their own `backendTokenFile`).
   * undefined = none.
   */
  readonly backendTokenFile: string | undefined;
}

const fields = ["tokensFile", "backendTokenFile"];

function path(v: unknown, field: string): string | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== "string" || v === "") throw invalidArgument(field, `must be a file path, got ${JSON.stringify(v)}`);
  return v;
}

/** Validates the `auth:` section (absent = off). */
export function resolveAuthConfig(v: unknown): AuthConfig {
  if (v === undefined || v === null) return { tokensFile: undefined, backendTokenFile: undefined };
  if (typeof v !== "object" || Array.isArray(v)) throw invalidArgument("auth", "must be a map");
  const a = v as Record<string, unknown>;
  for (const k of Object.keys(a)) if (!fields.includes(k)) throw invalidArgument(`auth.${k}`, `unknown field (allowed: ${fields.join(", ")})`);
  return { tokensFile: path(a["tokensFile"], "auth.tokensFile"), backendTokenFile: path(a["backendTokenFile"], "auth.backendTokenFile") };
}
