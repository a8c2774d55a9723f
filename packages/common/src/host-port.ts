import { invalidArgument } from "./errors.js";

/** Longest accepted host:port (a DNS name is at most 253 characters). */
export const maxHostPortChars = 300;

/** Addresses one `--addr` / `--coordinator` list may name (HA runs two or three coordinators; 8 leaves room). */
export const maxAddressListLength = 8;

/**
 * Checks a `host:port` value before anything dials or listens on it, so a typo
 * is an INVALID_ARGUMENT naming the field instead of a resolver error or a
 * hang. Accepts `host:port` and `[v6]:port`; a URL (`http://…`) is refused with the fix.
 */
export function parseHostPort(value: string, field: string): { host: string; port: number } {
  if (value.length === 0 || value.length > maxHostPortChars) throw invalidArgument(field, `expected host:port (at most ${String(maxHostPortChars)} characters), got "${value.slice(0, 40)}"`);
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

/**
 * A list of coordinator addresses, given as one comma-separated value or as
 * an array: 1..8 entries, each a host:port (parseHostPort), no duplicates,
 * order kept (the first is tried first). Whitespace around entries is ignored.
 */
export function parseHostPortList(value: string | readonly string[], field: string): string[] {
  const raw = typeof value === "string" ? value.split(",") : value;
  const list = raw.map((a) => a.trim());
  if (list.length === 0 || (list.length === 1 && list[0] === "")) throw invalidArgument(field, "expected at least one host:port");
  if (list.length > maxAddressListLength) throw invalidArgument(field, `at most ${String(maxAddressListLength)} addresses, got ${String(list.length)}`);
  const seen = new Set<string>();
  for (const a of list) {
    if (a === "") throw invalidArgument(field, `an empty entry in "${list.join(",").slice(0, 80)}"`);
    parseHostPort(a, field);
    if (seen.has(a)) throw invalidArgument(field, `"${a}" is listed twice`);
    seen.add(a);
  }
  return list;
}
