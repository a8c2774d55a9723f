import { parseHostPort, parseHostPortList } from "@warden/common";

/**
 * Checks a `host:port` flag before anything dials or listens on it, so a typo
 * is exit 2 naming the flag instead of a resolver error or a hang. Accepts
 * `host:port` and `[v6]:port`; a URL (`http://…`) is refused with the fix.
 * (The rules live in @warden/common parseHostPort, shared with the agent and the grpc client.)
 */
export function parseAddr(value: string, field: string): { host: string; port: number } {
  return parseHostPort(value, field);
}

/** `--addr` / WARDEN_ADDR: 1..8 comma-separated coordinator addresses (the first is tried first), each checked as parseAddr, no duplicates. */
export function parseAddrList(value: string, field: string): string[] {
  return parseHostPortList(value, field);
}
