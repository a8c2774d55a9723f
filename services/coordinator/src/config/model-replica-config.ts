import { invalidArgument, maxDurationMs, parseDurationMs } from "@warden/common";
import { defaultReplicas, replicaBounds, type ModelSpec, type ReplicaSettings, type SpreadMode } from "@warden/loader";

/** The keys of a models[] entry this module reads. */
export const modelReplicaFields = ["replicas", "spread", "idleTimeout"] as const;

const replicaKeys = ["min", "max", "targetInFlight", "scaleDownAfter"];
const spreadModes: readonly SpreadMode[] = ["node", "gpu", "any"];

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function int(v: unknown, field: string, dflt: number, min: number, max: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) throw invalidArgument(field, `must be an integer in [${String(min)}, ${String(max)}], got ${JSON.stringify(v)}`);
  return v;
}

function duration(v: unknown, field: string, dfltMs: number, maxMs: number): number {
  if (v === undefined) return dfltMs;
  if (typeof v !== "string" && typeof v !== "number") throw invalidArgument(field, `must be a duration like "5m", got ${JSON.stringify(v)}`);
  return parseDurationMs(v, field, maxMs);
}

/** `replicas: {min, max, targetInFlight, scaleDownAfter}`; bounds: `replicaBounds`. */
export function parseReplicaSettings(v: unknown, field: string): ReplicaSettings {
  if (v === undefined) return defaultReplicas;
  if (!isRecord(v)) throw invalidArgument(field, "must be a map with min, max, targetInFlight, scaleDownAfter");
  for (const k of Object.keys(v)) if (!replicaKeys.includes(k)) throw invalidArgument(`${field}.${k}`, `unknown field (allowed: ${replicaKeys.join(", ")})`);
  const B = replicaBounds;
  const min = int(v["min"], `${field}.min`, defaultReplicas.min, 0, B.maxReplicas);
  // An unset max follows a min above the default, so `replicas: {min: 2}` means exactly two.
  const max = int(v["max"], `${field}.max`, Math.max(defaultReplicas.max, min), 1, B.maxReplicas);
  if (min > max) throw invalidArgument(`${field}.min`, `must be <= max (${String(max)}), got ${String(min)}`);
  const targetInFlight = int(v["targetInFlight"], `${field}.targetInFlight`, defaultReplicas.targetInFlight, 1, B.maxTargetInFlight);
  const scaleDownAfterMs = duration(v["scaleDownAfter"], `${field}.scaleDownAfter`, defaultReplicas.scaleDownAfterMs, B.maxScaleDownAfterMs);
  if (scaleDownAfterMs <= 0) throw invalidArgument(`${field}.scaleDownAfter`, "must be > 0");
  return { min, max, targetInFlight, scaleDownAfterMs };
}

/** The replica fields of one models[] entry (`field` is its path, e.g. `models[0]`). */
export function parseModelReplicas(v: Readonly<Record<string, unknown>>, field: string): Pick<ModelSpec, "replicas" | "spread" | "idleTimeoutMs"> {
  const replicas = parseReplicaSettings(v["replicas"], `${field}.replicas`);
  const s = v["spread"] ?? "any";
  const spread = spreadModes.find((m) => m === s);
  if (spread === undefined) throw invalidArgument(`${field}.spread`, `must be one of ${spreadModes.join(", ")}, got ${JSON.stringify(s).slice(0, 64)}`);
  // 0 = never idle-evicted; unset = the policy's idleTimeout.
  const idleTimeoutMs = v["idleTimeout"] === undefined ? undefined : duration(v["idleTimeout"], `${field}.idleTimeout`, 0, maxDurationMs);
  return { replicas, spread, idleTimeoutMs };
}
