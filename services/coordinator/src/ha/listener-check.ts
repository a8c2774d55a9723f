import { readFile } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import type { CoordinatorConfig } from "../config/coordinator-config.js";

/** A listener a leader would open that cannot be bound now. */
export interface ListenerProblem {
  /** The config field: "httpListen" or "inferenceListen". */
  readonly field: string;
  readonly address: string;
  /** The bind error (EADDRINUSE, EACCES, EADDRNOTAVAIL …). */
  readonly error: string;
}

function hostPort(address: string): { host: string; port: number } | undefined {
  const colon = address.lastIndexOf(":");
  if (colon <= 0) return undefined;
  const port = Number(address.slice(colon + 1));
  if (!Number.isInteger(port) || port < 0 || port > 65_535) return undefined;
  return { host: address.slice(0, colon).replace(/^\[(.*)\]$/, "$1"), port };
}

function tryBind(address: string): Promise<string | undefined> {
  const hp = hostPort(address);
  // Port 0 binds anywhere; a malformed address is the config check's to refuse.
  if (hp === undefined || hp.port === 0) return Promise.resolve(undefined);
  return new Promise((resolve) => {
    const s = createServer();
    s.once("error", (err: NodeJS.ErrnoException) => {
      resolve(err.code ?? err.message);
    });
    s.listen({ host: hp.host, port: hp.port, exclusive: true }, () => {
      s.close(() => {
        resolve(undefined);
      });
    });
  });
}

/**
 * The listeners a member opens only when it leads (the HTTP API and the lean
 * inference listener; the gRPC `listen` is already held by its standby
 * server), each bound for a moment and closed: a member that cannot open
 * them would win the lease and then fail its takeover. `heldByStandby` names
 * addresses this member already serves while standing by (skipped: they move
 * to the leader in the same process). Empty: every listener can bind.
 */
export async function checkListenersBindable(config: Pick<CoordinatorConfig, "httpListen" | "inferenceListen">, heldByStandby: readonly string[] = []): Promise<ListenerProblem[]> {
  const wanted: { field: string; address: string | undefined }[] = [
    { field: "httpListen", address: config.httpListen },
    { field: "inferenceListen", address: config.inferenceListen },
  ];
  const out: ListenerProblem[] = [];
  for (const w of wanted) {
    if (w.address === undefined || heldByStandby.includes(w.address)) continue;
    const error = await tryBind(w.address);
    if (error !== undefined) out.push({ field: w.field, address: w.address, error });
  }
  return out;
}

/** Ports the kernel may hand to outgoing connections: its ephemeral range less the reserved ports (Linux); undefined where it cannot be read. */
export interface EphemeralPorts {
  readonly min: number;
  readonly max: number;
  /** net.ipv4.ip_local_reserved_ports: never handed out, so safe to rebind. */
  readonly reserved: readonly { readonly min: number; readonly max: number }[];
}

export async function ephemeralPorts(dir = "/proc/sys/net/ipv4"): Promise<EphemeralPorts | undefined> {
  const text = await readFile(join(dir, "ip_local_port_range"), "utf8").catch(() => undefined);
  const [min, max] = (text ?? "").trim().split(/\s+/).map(Number);
  if (min === undefined || max === undefined || !Number.isInteger(min) || !Number.isInteger(max) || min > max) return undefined;
  const reservedText = await readFile(join(dir, "ip_local_reserved_ports"), "utf8").catch(() => "");
  const reserved = reservedText
    .trim()
    .split(",")
    .filter((r) => r !== "")
    .slice(0, 1_000)
    .map((r) => r.split("-").map(Number))
    .filter((r) => r.every((n) => Number.isInteger(n)))
    .map(([a, b]) => ({ min: a ?? 0, max: b ?? a ?? 0 }));
  return { min, max, reserved };
}

/**
 * The listeners an HA member hands from its standby servers to its
 * coordinator at takeover (closed, then bound again) whose port the kernel
 * may give an outgoing connection: in between, any outgoing connection on
 * the host can get that port as its local port, and Linux then refuses the
 * listen (EADDRINUSE) for as long as that connection lives — the takeover
 * fails until it ends. Port 0 is such a port too (picked from that range).
 * Safe: a port below the range, or one in net.ipv4.ip_local_reserved_ports.
 */
export function portsInEphemeralRange(config: Pick<CoordinatorConfig, "listen" | "httpListen" | "inferenceListen">, ports: EphemeralPorts): string[] {
  const out: string[] = [];
  for (const [field, address] of [["listen", config.listen], ["httpListen", config.httpListen], ["inferenceListen", config.inferenceListen]] as const) {
    const hp = address === undefined ? undefined : hostPort(address);
    if (hp === undefined) continue;
    const inRange = hp.port === 0 || (hp.port >= ports.min && hp.port <= ports.max && !ports.reserved.some((r) => hp.port >= r.min && hp.port <= r.max));
    if (inRange) out.push(`${field} ${address ?? ""}`);
  }
  return out;
}
