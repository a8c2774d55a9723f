import type { IncomingMessage, Server, ServerResponse } from "node:http";

/**
 * What every response of the HTTP listener carries, whatever the route (the
 * OpenAI API, the dashboard, a 404, an error, a hijacked event stream): no
 * MIME sniffing, never framed, no Referer leaking URLs, nothing loaded or
 * submitted by a page unless its route sets a wider policy (the dashboard
 * page does, dashboard-page.ts), not readable as a cross-origin resource.
 * Under TLS, browsers are told to keep to HTTPS (a year; this host only:
 * other services on sibling names are not Warden's to pin).
 */
export const defaultCsp = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

export const hstsMaxAgeSeconds = 31_536_000;

export function securityHeaders(tls: boolean): Readonly<Record<string, string>> {
  return {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "content-security-policy": defaultCsp,
    "cross-origin-resource-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
    ...(tls ? { "strict-transport-security": `max-age=${String(hstsMaxAgeSeconds)}` } : {}),
  };
}

/**
 * Sets the headers on every response of `server` before its request handler
 * runs (a listener prepended to `request`), so no route, hook order, error
 * path or hijacked reply can miss them. A route may still replace one (its
 * own `content-security-policy`): headers given to writeHead win over these.
 */
export function installSecurityHeaders(server: Pick<Server, "prependListener" | "on">, tls: boolean): void {
  const headers = Object.entries(securityHeaders(tls));
  server.prependListener("request", (_req: IncomingMessage, res: ServerResponse) => {
    for (const [k, v] of headers) res.setHeader(k, v);
  });
  // An Expect other than 100-continue: Node would answer 417 itself, bare; this is the same answer with the headers.
  server.on("checkExpectation", (_req: IncomingMessage, res: ServerResponse) => {
    const body = JSON.stringify({ error: { message: "expect: only 100-continue is supported", type: "invalid_request_error", param: "expect", code: null } });
    res.writeHead(417, { ...Object.fromEntries(headers), "content-type": "application/json", connection: "close" }).end(body);
  });
}
