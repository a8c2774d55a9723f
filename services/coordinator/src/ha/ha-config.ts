import { invalidArgument, parseDurationMs } from "@warden/common";

/**
 * The coordinator's `ha:` section, validated whole. Bounds:
 * lease 200 ms – 10 min, renew 50 ms – 60 s, margin 1 ms – (lease − renew − 1),
 * replicas 1–5, holder 1–64 of [A-Za-z0-9_-], advertise a host:port of at most 300 characters.
 */
export interface HaConfig {
  /** host:port agents and clients dial; undefined = the listen address (checked concrete at start). */
  readonly advertise: string | undefined;
  /** Name prefix of this member's lease holder; undefined = the hostname. Each incarnation appends -<ULID>. */
  readonly holder: string | undefined;
  readonly leaseMs: number;
  readonly renewMs: number;
  readonly marginMs: number;
  /** JetStream replicas of the lease bucket, journal stream and state bucket. */
  readonly replicas: number;
}

export const haConfigFields = ["advertise", "holder", "lease", "renew", "margin", "replicas"];

export const defaultHaConfig: HaConfig = { advertise: undefined, holder: undefined, leaseMs: 3_000, renewMs: 1_000, marginMs: 500, replicas: 3 };

const holderPattern = /^[A-Za-z0-9_-]{1,64}$/;
const hostPortPattern = /^[^\s/]{1,300}:\d{1,5}$/;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function ms(v: unknown, field: string, dflt: number, min: number, max: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== "string" && typeof v !== "number") throw invalidArgument(field, `must be a duration like "3s", got ${JSON.stringify(v)}`);
  const out = parseDurationMs(v, field, max);
  if (out < min) throw invalidArgument(field, `must be at least ${String(min)}ms, got ${String(out)}ms`);
  return out;
}

/** A host:port whose port is 1–65535. */
export function checkHostPort(v: string, field: string): string {
  if (!hostPortPattern.test(v)) throw invalidArgument(field, `must be host:port, got ${JSON.stringify(v.slice(0, 64))}`);
  const port = Number(v.slice(v.lastIndexOf(":") + 1));
  if (port < 1 || port > 65_535) throw invalidArgument(field, `port must be 1..65535, got ${String(port)}`);
  return v;
}

/** Parses `ha:`; undefined when absent (`--ha` then turns it on with {@link defaultHaConfig}). */
export function parseHaConfig(input: unknown): HaConfig | undefined {
  if (input === undefined || input === null) return undefined;
  if (input === true || input === false) return input ? defaultHaConfig : undefined;
  if (!isRecord(input)) throw invalidArgument("ha", "must be a map");
  for (const k of Object.keys(input)) if (!haConfigFields.includes(k)) throw invalidArgument(`ha.${k}`, `unknown field (allowed: ${haConfigFields.join(", ")})`);
  const a = input["advertise"];
  if (a !== undefined && typeof a !== "string") throw invalidArgument("ha.advertise", "must be host:port");
  const h = input["holder"];
  if (h !== undefined && (typeof h !== "string" || !holderPattern.test(h))) throw invalidArgument("ha.holder", `must be 1..64 of [A-Za-z0-9_-], got ${JSON.stringify(h)}`);
  const leaseMs = ms(input["lease"], "ha.lease", defaultHaConfig.leaseMs, 200, 600_000);
  const renewMs = ms(input["renew"], "ha.renew", defaultHaConfig.renewMs, 50, 60_000);
  if (renewMs >= leaseMs) throw invalidArgument("ha.renew", `must be shorter than ha.lease (${String(leaseMs)}ms), got ${String(renewMs)}ms`);
  const marginMs = ms(input["margin"], "ha.margin", Math.min(defaultHaConfig.marginMs, leaseMs - renewMs - 1), 1, 600_000);
  if (marginMs > leaseMs - renewMs - 1) throw invalidArgument("ha.margin", `must be at most lease − renew − 1 (${String(leaseMs - renewMs - 1)}ms), got ${String(marginMs)}ms`);
  const r = input["replicas"];
  if (r !== undefined && (typeof r !== "number" || !Number.isInteger(r) || r < 1 || r > 5)) throw invalidArgument("ha.replicas", `must be an integer in [1, 5], got ${JSON.stringify(r)}`);
  return {
    advertise: a === undefined ? undefined : checkHostPort(a, "ha.advertise"),
    holder: h,
    leaseMs,
    renewMs,
    marginMs,
    replicas: r ?? defaultHaConfig.replicas,
  };
}

function isWildcardHost(listen: string): boolean {
  const host = listen.slice(0, listen.lastIndexOf(":")).replace(/^\[(.*)\]$/, "$1");
  return host === "" || host === "0.0.0.0" || host === "::";
}

/**
 * The checks that need the whole config: HA coordinators use remote agents
 * only, need NATS, and need an address to advertise. Returns the advertised address.
 */
export function checkHaRequirements(c: { readonly embeddedAgent: boolean; readonly nats: unknown; readonly listen: string; readonly ha: HaConfig }): string {
  if (c.embeddedAgent) throw invalidArgument("embeddedAgent", "must be false with ha: (HA coordinators use remote agents only)");
  if (c.nats === undefined) throw invalidArgument("nats.url", "ha: needs the NATS cluster URLs (nats.url or --nats-url)");
  if (c.ha.advertise !== undefined) return c.ha.advertise;
  if (isWildcardHost(c.listen)) throw invalidArgument("ha.advertise", `required when listen (${c.listen}) is a wildcard address: the host:port agents and clients dial`);
  return checkHostPort(c.listen, "listen");
}
