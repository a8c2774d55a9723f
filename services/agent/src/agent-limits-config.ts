import { invalidArgument } from "@warden/common";
import { defaultMaxConcurrentStreams, defaultMaxMessageBytes, defaultMaxMetadataBytes, parsePeerCaps, peerCapKeys, type PeerCaps } from "@warden/grpc";

/** The agent's caps (YAML `limits:`): its AgentService server and its NodeService client. */
export interface AgentLimits {
  /** Largest gRPC message both ways. @default 50 MiB */
  readonly maxMessageBytes: number;
  /** Request metadata one call may carry. @default 16 KiB */
  readonly maxMetadataBytes: number;
  /** Concurrent calls on one HTTP/2 connection. @default 256 */
  readonly maxStreamsPerConnection: number;
  /** The AgentService listener's connections per peer and in total, handshake and idle timeouts (peer-caps.ts). */
  readonly peerCaps: PeerCaps;
}

const mib = 1024 * 1024;
const bounds = {
  maxMessageSize: { dflt: defaultMaxMessageBytes, min: 64 * 1024, max: 1024 * mib },
  maxMetadataSize: { dflt: defaultMaxMetadataBytes, min: 1024, max: mib },
  maxStreamsPerConnection: { dflt: defaultMaxConcurrentStreams, min: 1, max: 65_536 },
} as const;
const units: Readonly<Record<string, number>> = { "": 1, b: 1, kib: 1024, mib, gib: 1024 * mib, kb: 1e3, mb: 1e6, gb: 1e9 };

function value(v: unknown, key: keyof typeof bounds): number {
  const b = bounds[key];
  const field = `limits.${key}`;
  if (v === undefined) return b.dflt;
  let n: number | undefined = typeof v === "number" ? v : undefined;
  if (typeof v === "string" && key !== "maxStreamsPerConnection") {
    const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(v);
    const unit = units[(m?.[2] ?? "?").toLowerCase()];
    if (m !== null && unit !== undefined) n = Math.round(Number(m[1]) * unit);
  }
  if (n === undefined || !Number.isInteger(n) || n < b.min || n > b.max) throw invalidArgument(field, `must be an integer in [${String(b.min)}, ${String(b.max)}]${key === "maxStreamsPerConnection" ? "" : ' or a size like "50MiB"'}, got ${JSON.stringify(v)}`);
  return n;
}

/** Parses the agent's `limits:` section (undefined = defaults). */
export function parseAgentLimits(input: unknown): AgentLimits {
  if (input === undefined || input === null) input = {};
  if (typeof input !== "object" || Array.isArray(input)) throw invalidArgument("limits", "must be a map");
  const raw = input as Record<string, unknown>;
  const allowed = [...Object.keys(bounds), ...peerCapKeys];
  for (const k of Object.keys(raw)) if (!allowed.includes(k)) throw invalidArgument(`limits.${k}`, `unknown field (allowed: ${allowed.join(", ")})`);
  return { maxMessageBytes: value(raw["maxMessageSize"], "maxMessageSize"), maxMetadataBytes: value(raw["maxMetadataSize"], "maxMetadataSize"), maxStreamsPerConnection: value(raw["maxStreamsPerConnection"], "maxStreamsPerConnection"), peerCaps: parsePeerCaps(raw) };
}
