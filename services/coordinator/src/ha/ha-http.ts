import type { CoordinatorConfig } from "../config/coordinator-config.js";
import type { DashboardHa, DashboardHaMember } from "../http/dashboard/dashboard-view.js";
import type { HaMemberSeen, HaRole } from "./ha-members.js";
import type { LeaseEntry } from "./lease-keeper.js";

function splitHostPort(address: string): { host: string; port: string } {
  const colon = address.lastIndexOf(":");
  return { host: address.slice(0, colon), port: address.slice(colon + 1) };
}

function isWildcard(host: string): boolean {
  const h = host.replace(/^\[(.*)\]$/, "$1");
  return h === "" || h === "0.0.0.0" || h === "::";
}

/**
 * `httpListen` with port 0 replaced by the port the standby's listener got:
 * the leader's coordinator must bind the same port the member announced.
 */
export function pinHttpListen(c: CoordinatorConfig, bound: string | undefined): CoordinatorConfig {
  if (c.httpListen === undefined || bound === undefined) return c;
  const want = splitHostPort(c.httpListen);
  if (want.port !== "0") return c;
  return { ...c, httpListen: `${want.host}:${splitHostPort(bound).port}` };
}

/**
 * The HTTP base URL this member announces: https when the coordinator has
 * `tls:`, the host of `httpListen` unless it is a wildcard (then the host of
 * the advertised gRPC address, the one clients already reach), its port.
 */
export function httpUrlOf(c: CoordinatorConfig, advertise: string): string | undefined {
  if (c.httpListen === undefined) return undefined;
  const l = splitHostPort(c.httpListen);
  const host = isWildcard(l.host) ? splitHostPort(advertise).host : l.host;
  return `${c.tls === undefined ? "http" : "https"}://${host}:${l.port}`;
}

/** The HTTP side's view of HA (GET /ha/leader, /api/dashboard/ha) from the runner's state. */
export function haHttpView(o: { readonly holder: string; readonly role: HaRole; readonly httpUrl: string | undefined; readonly leader: LeaseEntry | undefined; readonly members: readonly HaMemberSeen[] }): DashboardHa {
  const self: DashboardHaMember = { holder: o.holder, role: o.role, httpUrl: o.httpUrl ?? "" };
  const others = o.members.map((m): DashboardHaMember => ({ holder: m.holder, role: m.role, httpUrl: m.httpUrl ?? "" }));
  const lh = o.leader?.holder ?? null;
  const leader = lh === null ? undefined : lh === o.holder ? self : (others.find((m) => m.holder === lh) ?? { holder: lh, role: "leader", httpUrl: "" });
  return { enabled: true, self, ...(leader === undefined ? {} : { leader }), epoch: String(o.leader?.epoch ?? 0), members: [self, ...others] };
}
