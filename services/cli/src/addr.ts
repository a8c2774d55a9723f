import { invalidArgument } from "@warden/common";

/** Longest accepted host:port (a DNS name is at most 253 characters). */
const maxAddrLength = 300;

/**
 * Checks a `host:port` flag before anything dials or listens on it, so a typo
 * is exit 2 naming the flag instead of a resolver error or a hang. Accepts
 * `host:port` and `[v6]:port`; a URL (`http://…`) is refused with the fix.
 */
export function parseAddr(value: string, field: string): { host: string; port: number } {
  if (value.length === 0 || value.length > maxAddrLength) throw invalidArgument(field, `expected host:port (at most ${String(maxAddrLength)} characters), got "${value.slice(0, 40)}"`);
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(value);
  if (scheme !== null) throw invalidArgument(field, `expected host:port without a scheme, got "${value}" (try "${value.slice(scheme[0].length).replace(/\/.*$/, "")}")`);
  const colon = value.lastIndexOf(":");
  if (colon <= 0) throw invalidArgument(field, `expected host:port, got "${value}"`);
  const host = value.slice(0, colon);
  const portText = value.slice(colon + 1);
  if (!/^\d{1,5}$/.test(portText)) throw invalidArgument(field, `expected a port number after the last ":", got "${portText}" in "${value}"`);
  const port = Number(portText);
  if (port > 65535) throw invalidArgument(field, `port ${portText} is out of range 0–65535 in "${value}"`);
  if (host.includes(":") && !/^\[[^\]]+\]$/.test(host)) throw invalidArgument(field, `an IPv6 host needs brackets: "[${host}]:${portText}"`);
  return { host: host.replace(/^\[(.*)\]$/, "$1"), port };
}
