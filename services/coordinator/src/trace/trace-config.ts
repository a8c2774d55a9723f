import { invalidArgument } from "@warden/common";
import { defaultTraceSettings, maxTraceBytes, minTraceBytes, type TraceSettings } from "./trace-recorder.js";
import { parseSizeBytes } from "../config/coordinator-config.js";

export type { TraceSettings } from "./trace-recorder.js";

/**
 * `trace: { enabled, maxBytes }`: whether the coordinator records its
 * workload trace, and the cap on its files together (1MiB to 16GiB).
 */
export function parseTraceSettings(v: unknown): TraceSettings {
  if (v === undefined) return defaultTraceSettings;
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw invalidArgument("trace", "must be a map");
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) if (k !== "enabled" && k !== "maxBytes") throw invalidArgument(`trace.${k}`, "unknown field (allowed: enabled, maxBytes)");
  const enabled = o["enabled"] ?? defaultTraceSettings.enabled;
  if (typeof enabled !== "boolean") throw invalidArgument("trace.enabled", `must be true or false, got ${JSON.stringify(enabled)}`);
  const maxBytes = o["maxBytes"] === undefined ? defaultTraceSettings.maxBytes : parseSizeBytes(o["maxBytes"], "trace.maxBytes");
  if (maxBytes < minTraceBytes || maxBytes > maxTraceBytes) throw invalidArgument("trace.maxBytes", `must be from 1MiB to 16GiB, got ${String(maxBytes)} bytes`);
  return { enabled, maxBytes };
}
