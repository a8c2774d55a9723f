import { invalidArgument } from "@warden/common";
import type { Policy } from "@warden/proto";
import type { DashboardPolicy } from "./dashboard-view.js";

/** GetPolicy's answer as the Policy page shows it (milliseconds as numbers). */
export function policyJson(p: Policy | undefined): DashboardPolicy {
  return {
    limitPerNode: p?.limitPerNode ?? 0,
    idleCheck: p?.idleCheck ?? false,
    idleTimeoutMs: Number(p?.idleTimeoutMs ?? 0n),
    busyCheck: p?.busyCheck ?? false,
    busyTimeoutMs: Number(p?.busyTimeoutMs ?? 0n),
    memoryReclaimer: p?.memoryReclaimer ?? false,
    memoryThreshold: p?.memoryThreshold ?? 0,
    forceEvictionWhenBusy: p?.forceEvictionWhenBusy ?? false,
    sizeAware: p?.sizeAware ?? false,
    tickIntervalMs: Number(p?.tickIntervalMs ?? 0n),
    models: (p?.models ?? []).map((m) => ({ model: m.model, pinned: m.pinned, groups: [...m.groups] })),
  };
}

/** The Policy page's editable fields and their JSON types (UpdatePolicy checks ranges: its errors name the field). */
const editable = {
  limitPerNode: "count",
  idleCheck: "flag",
  idleTimeoutMs: "ms",
  busyCheck: "flag",
  busyTimeoutMs: "ms",
  memoryReclaimer: "flag",
  memoryThreshold: "fraction",
  forceEvictionWhenBusy: "flag",
  sizeAware: "flag",
} as const;

/** Largest policy body read: nine scalars fit many times over. */
export const maxPolicyBodyBytes = 4096;

/** The scalar part of an UpdatePolicy patch (PolicyPatch's init shape). */
export interface PolicyPatchInit {
  limitPerNode?: number;
  idleCheck?: boolean;
  idleTimeoutMs?: bigint;
  busyCheck?: boolean;
  busyTimeoutMs?: bigint;
  memoryReclaimer?: boolean;
  memoryThreshold?: number;
  forceEvictionWhenBusy?: boolean;
  sizeAware?: boolean;
}

/**
 * The page's edit as an UpdatePolicy patch: only the fields given change.
 * An unknown field or a wrong type is refused naming it, before anything runs.
 */
export function parsePolicyPatch(body: unknown): PolicyPatchInit {
  if (typeof body !== "object" || body === null || Array.isArray(body)) throw invalidArgument("body", "must be a JSON object");
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(body as Record<string, unknown>)) {
    const kind = (editable as Readonly<Record<string, string>>)[k];
    if (kind === undefined) throw invalidArgument(k.slice(0, 64), `is not an editable policy field (fields: ${Object.keys(editable).join(", ")})`);
    if (kind === "flag") {
      if (typeof v !== "boolean") throw invalidArgument(k, "must be true or false");
      out[k] = v;
    } else if (kind === "fraction") {
      if (typeof v !== "number" || !Number.isFinite(v)) throw invalidArgument(k, "must be a number");
      out[k] = v;
    } else {
      if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) throw invalidArgument(k, "must be a whole number >= 0");
      out[k] = kind === "ms" ? BigInt(v) : v;
    }
  }
  if (Object.keys(out).length === 0) throw invalidArgument("body", "names no field to change");
  return out;
}
