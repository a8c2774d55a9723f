import { Code, WardenError, invalidArgument } from "@warden/common";
import { replicaBounds, type ModelSpec, type ReplicaSettings } from "./model-spec.js";
import type { ScalePatch } from "./replica-status.js";

/**
 * An operator's ScaleModel override of one model's `min`/`max`, with the
 * config's `replicas` it was made against. It is kept across config reloads
 * as long as the reloaded config leaves that model's `replicas` as it was:
 * an operator's live decision outlives an unrelated reload, but a config
 * that changes the model's replicas is a newer decision and wins (the
 * override is dropped). In memory only, like UpdatePolicy.
 */
export interface ScaleOverride {
  readonly min: number;
  readonly max: number;
  readonly configReplicas: ReplicaSettings;
}

function checkCount(field: "min" | "max", value: unknown, lowest: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < lowest || value > replicaBounds.maxReplicas) {
    throw invalidArgument(field, `must be an integer in [${String(lowest)}, ${String(replicaBounds.maxReplicas)}], got ${String(value)}`);
  }
  return value;
}

/**
 * Validates a ScalePatch against the model's settings now, as a whole:
 * 0 ≤ min ≤ max, 1 ≤ max ≤ replicaBounds.maxReplicas. Returns the settings
 * it would give; throws (NOT_FOUND naming `model`, INVALID_ARGUMENT naming
 * `min` or `max`) without changing anything.
 */
export function validateScale(spec: ModelSpec | undefined, model: string, patch: ScalePatch): ReplicaSettings {
  if (spec === undefined) throw new WardenError(Code.NotFound, `model: "${model}" is not configured`, { details: { field: "model" } });
  const min = patch.min === undefined ? spec.replicas.min : checkCount("min", patch.min, 0);
  const max = patch.max === undefined ? spec.replicas.max : checkCount("max", patch.max, 1);
  if (min > max) {
    // Name the field the operator set; when both were set, `min` is the one out of range.
    throw invalidArgument(patch.min !== undefined ? "min" : "max", `min (${String(min)}) must not exceed max (${String(max)})`);
  }
  return { ...spec.replicas, min, max };
}

/**
 * Carries the overrides over a config reload: an override survives when the
 * reloaded model's `replicas` equal the config's it was made against, and is
 * applied to the new spec; otherwise (or when the model is gone) it is dropped.
 */
export function carryScaleOverrides(overrides: Map<string, ScaleOverride>, next: Map<string, ModelSpec>): void {
  for (const [id, o] of [...overrides]) {
    const spec = next.get(id);
    if (spec === undefined || !sameReplicas(spec.replicas, o.configReplicas)) {
      overrides.delete(id);
      continue;
    }
    next.set(id, { ...spec, replicas: { ...spec.replicas, min: o.min, max: o.max } });
  }
}

function sameReplicas(a: ReplicaSettings, b: ReplicaSettings): boolean {
  return a.min === b.min && a.max === b.max && a.targetInFlight === b.targetInFlight && a.scaleDownAfterMs === b.scaleDownAfterMs;
}
