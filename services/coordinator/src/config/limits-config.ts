import { invalidArgument } from "@warden/common";
import { defaultMaxConcurrentStreams, defaultMaxMessageBytes, defaultMaxMetadataBytes, parsePeerCaps, peerCapKeys, type PeerCaps } from "@warden/grpc";

/**
 * The coordinator's caps on what callers can make it hold (YAML `limits:`).
 * Every one is documented here with its default and its range; past a cap a
 * call is RESOURCE_EXHAUSTED naming it, and nothing is applied.
 */
export interface CoordinatorLimits {
  /** Largest gRPC message, both ways, on every server (Admin/Inference/Node, data plane) and client (agents, backends). @default 50 MiB */
  readonly maxMessageBytes: number;
  /** Request metadata one call may carry. @default 16 KiB */
  readonly maxMetadataBytes: number;
  /** Concurrent calls on one HTTP/2 connection (SETTINGS_MAX_CONCURRENT_STREAMS). @default 256 */
  readonly maxStreamsPerConnection: number;
  /** Open requests on one backend instance. @default 100000 */
  readonly maxOpenRequestsPerInstance: number;
  /** Calls waiting for one model to load. @default 512 */
  readonly maxWaitingPerModel: number;
  /** Registered nodes. @default 4096 */
  readonly maxNodes: number;
  /** Inventory entries in one heartbeat. @default 4096 */
  readonly maxInventoryPerHeartbeat: number;
  /** Orphan processes in one heartbeat. @default 1024 */
  readonly maxOrphansPerHeartbeat: number;
  /** Open WatchEvents streams of one caller (peer host today; the token's identity once callers authenticate). @default 16 */
  readonly maxWatchersPerCaller: number;
  /** Open WatchEvents streams in total. @default 256 */
  readonly maxWatchers: number;
  /** Every gRPC listener's connections per peer and in total, handshake and idle timeouts (`limits.maxConnectionsPerPeer`, … : peer-caps.ts). */
  readonly peerCaps: PeerCaps;
}

const mib = 1024 * 1024;

/** Each cap's default and its allowed range. */
export const coordinatorLimitBounds = Object.freeze({
  maxMessageSize: { field: "maxMessageBytes", dflt: defaultMaxMessageBytes, min: 64 * 1024, max: 1024 * mib },
  maxMetadataSize: { field: "maxMetadataBytes", dflt: defaultMaxMetadataBytes, min: 1024, max: mib },
  maxStreamsPerConnection: { field: "maxStreamsPerConnection", dflt: defaultMaxConcurrentStreams, min: 1, max: 65_536 },
  maxOpenRequestsPerInstance: { field: "maxOpenRequestsPerInstance", dflt: 100_000, min: 1, max: 1_000_000 },
  maxWaitingPerModel: { field: "maxWaitingPerModel", dflt: 512, min: 1, max: 100_000 },
  maxNodes: { field: "maxNodes", dflt: 4096, min: 1, max: 10_000 },
  maxInventoryPerHeartbeat: { field: "maxInventoryPerHeartbeat", dflt: 4096, min: 1, max: 8192 },
  maxOrphansPerHeartbeat: { field: "maxOrphansPerHeartbeat", dflt: 1024, min: 1, max: 1024 },
  maxWatchersPerCaller: { field: "maxWatchersPerCaller", dflt: 16, min: 1, max: 4096 },
  maxWatchers: { field: "maxWatchers", dflt: 256, min: 1, max: 4096 },
} as const);

type YamlKey = keyof typeof coordinatorLimitBounds;

const sizeKeys: ReadonlySet<YamlKey> = new Set<YamlKey>(["maxMessageSize", "maxMetadataSize"]);
const sizeUnits: Readonly<Record<string, number>> = { "": 1, b: 1, kib: 1024, mib, gib: 1024 * mib, kb: 1e3, mb: 1e6, gb: 1e9 };

function sizeOf(v: unknown, field: string): number {
  if (typeof v === "number") return v;
  const m = typeof v === "string" ? /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(v) : null;
  const unit = sizeUnits[(m?.[2] ?? "?").toLowerCase()];
  if (m === null || unit === undefined) throw invalidArgument(field, `must be a size like "50MiB", got ${JSON.stringify(v)}`);
  return Math.round(Number(m[1]) * unit);
}

/** Parses the `limits:` section (undefined = every default); INVALID_ARGUMENT names the field. */
export function parseCoordinatorLimits(input: unknown): CoordinatorLimits {
  if (input === undefined || input === null) input = {};
  if (typeof input !== "object" || Array.isArray(input)) throw invalidArgument("limits", "must be a map");
  const raw = input as Record<string, unknown>;
  const keys = Object.keys(coordinatorLimitBounds) as YamlKey[];
  const allowed = [...keys, ...peerCapKeys];
  for (const k of Object.keys(raw)) if (!allowed.includes(k)) throw invalidArgument(`limits.${k}`, `unknown field (allowed: ${allowed.join(", ")})`);
  const out: Record<string, number> = {};
  for (const k of keys) {
    const b = coordinatorLimitBounds[k];
    const field = `limits.${k}`;
    const v = raw[k];
    const n = v === undefined ? b.dflt : sizeKeys.has(k) ? sizeOf(v, field) : v;
    if (typeof n !== "number" || !Number.isInteger(n) || n < b.min || n > b.max) throw invalidArgument(field, `must be an integer in [${String(b.min)}, ${String(b.max)}], got ${JSON.stringify(v)}`);
    out[b.field] = n;
  }
  return { ...(out as unknown as Omit<CoordinatorLimits, "peerCaps">), peerCaps: parsePeerCaps(raw) };
}

/** The server options every coordinator listener gets from its limits. */
export function serverLimits(l: CoordinatorLimits): { maxReceiveMessageBytes: number; maxSendMessageBytes: number; maxMetadataBytes: number; maxConcurrentStreams: number; peerCaps: PeerCaps } {
  return { maxReceiveMessageBytes: l.maxMessageBytes, maxSendMessageBytes: l.maxMessageBytes, maxMetadataBytes: l.maxMetadataBytes, maxConcurrentStreams: l.maxStreamsPerConnection, peerCaps: l.peerCaps };
}

/** The client options of every coordinator client (agents, backends). */
export function clientLimits(l: CoordinatorLimits): { maxReceiveMessageBytes: number; maxSendMessageBytes: number } {
  return { maxReceiveMessageBytes: l.maxMessageBytes, maxSendMessageBytes: l.maxMessageBytes };
}
