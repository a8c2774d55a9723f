import { isIP } from "node:net";
import type { FastifyReply, FastifyRequest } from "fastify";
import { Code, WardenError, invalidArgument } from "@warden/common";

/** Most `http.allowedHosts` entries. */
export const maxAllowedHosts = 64;
/** Longest host name (DNS: 253 characters). */
const maxHostChars = 253;

/** The names a loopback listener is reached by; always allowed. */
export const loopbackHosts: readonly string[] = ["localhost", "127.0.0.1", "::1"];

const hostName = /^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*\.?$/;

/** A host name or IP literal, lower case, without brackets or a trailing dot; undefined when it is neither. */
function normalHost(v: string): string | undefined {
  const bare = v.startsWith("[") && v.endsWith("]") ? v.slice(1, -1) : v;
  if (isIP(bare) !== 0) return bare.toLowerCase();
  const lower = bare.toLowerCase();
  return hostName.test(lower) ? lower.replace(/\.$/, "") : undefined;
}

/**
 * YAML `http.allowedHosts`: the names (besides the loopback ones and the
 * httpListen host) this listener answers to when auth is off, e.g. the
 * machine's DNS name behind a reverse proxy. Host names or IP literals,
 * without a port (any port matches); at most 64.
 */
export function parseAllowedHosts(v: unknown, field = "http.allowedHosts"): readonly string[] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) throw invalidArgument(field, "must be a list of host names, e.g. [warden.example.com]");
  if (v.length > maxAllowedHosts) throw invalidArgument(field, `at most ${String(maxAllowedHosts)} names, got ${String(v.length)}`);
  return v.map((h, i) => {
    const at = `${field}[${String(i)}]`;
    if (typeof h !== "string" || h.length > maxHostChars + 2) throw invalidArgument(at, `must be a host name or IP address, got ${JSON.stringify(h).slice(0, 80)}`);
    const n = normalHost(h);
    if (n === undefined) throw invalidArgument(at, `must be a host name or IP address without a port, got ${JSON.stringify(h)}`);
    return n;
  });
}

/** The name part of a Host header (`name`, `name:port`, `[v6]`, `[v6]:port`), normalised; undefined when malformed. */
export function hostOfHeader(header: string): string | undefined {
  if (header.length > maxHostChars + 8) return undefined;
  const m = /^(\[[0-9a-fA-F:.]+\]|[^:[\]]+)(?::\d{1,5})?$/.exec(header);
  return m === null ? undefined : normalHost(m[1] ?? "");
}

/** Every name a listener on `listen` accepts in Host with auth off: loopback names, its own host (unless a wildcard), `allowed`. */
export function acceptedHosts(listen: string, allowed: readonly string[]): ReadonlySet<string> {
  const own = hostOfHeader(listen);
  const wildcard = own === "0.0.0.0" || own === "::";
  return new Set([...loopbackHosts, ...(own === undefined || wildcard ? [] : [own]), ...allowed]);
}

/**
 * An onRequest hook refusing, with auth off, a request whose Host header is
 * not one `accepted` names: a page on another site that rebinds its DNS name
 * to this machine (DNS rebinding) reaches the listener with its own name in
 * Host, and without tokens nothing else would stop it from pressing the
 * dashboard's buttons. 421 (Misdirected Request), before anything else runs.
 * With auth on it lets every name through: a browser never sends a bearer
 * token on its own, so such a page gets 401. No Host at all is 400 on HTTP/1.1
 * (as Node would answer) and let through on HTTP/1.0.
 */
export function hostCheckHook(o: { readonly enabled: () => boolean; readonly accepted: ReadonlySet<string> }): (request: FastifyRequest, reply: FastifyReply) => Promise<void> {
  const names = [...o.accepted].join(", ");
  return async (request) => {
    const header = request.headers.host;
    if (header === undefined) {
      // HTTP/1.1 requires it whatever the auth (Node's own check is off so that this answer carries the security headers).
      if (request.raw.httpVersion !== "1.0") throw new WardenError(Code.InvalidArgument, "host: the Host header is required", { details: { field: "host" } });
      // HTTP/1.0 without one (a load balancer's health check): no browser sends that, so no rebinding page either.
      return;
    }
    if (!o.enabled()) return;
    const host = typeof header === "string" ? hostOfHeader(header) : undefined;
    if (host !== undefined && o.accepted.has(host)) return;
    const shown = typeof header === "string" ? JSON.stringify(header.slice(0, 80)) : "(none)";
    throw new WardenError(Code.PermissionDenied, `host: ${shown} is not a name this listener answers to with auth off (accepted: ${names}; add the name to http.allowedHosts, or turn auth on)`, { details: { field: "host", httpStatus: 421 } });
  };
}
