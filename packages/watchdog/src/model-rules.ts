import { invalidArgument, maxDurationMs } from "@warden/common";
import { describeValue } from "./describe-value.js";

/**
 * Per-model rules the idle check honours, set by the loader from
 * its model table: `minReplicas` is a floor for the count of the model's
 * ready instances — the idle check never takes the model below it, as a pin
 * would not (LRU, group, memory and explicit stops still may);
 * `idleTimeoutMs` overrides the policy's idle timeout for the model: 0 =
 * never idle-evicted, a positive value idle-evicts the model after that long
 * even while the policy's idle check is off (an operator's per-model TTL,
 * like llama-swap's `ttl`); absent = the policy's.
 */
export interface ModelRule {
  readonly minReplicas: number;
  readonly idleTimeoutMs: number | undefined;
}

/** Checks every rule as a whole (INVALID_ARGUMENT naming the model's field; nothing applied on error) and returns a copy. */
export function checkModelRules(rules: ReadonlyMap<string, ModelRule>): ReadonlyMap<string, ModelRule> {
  const out = new Map<string, ModelRule>();
  for (const [model, r] of rules) {
    if (!Number.isInteger(r.minReplicas) || r.minReplicas < 0) throw invalidArgument(`modelRules.${model}.minReplicas`, `must be a non-negative integer, got ${describeValue(r.minReplicas)}`);
    const t = r.idleTimeoutMs;
    if (t !== undefined && (!Number.isFinite(t) || t < 0 || t > maxDurationMs)) {
      throw invalidArgument(`modelRules.${model}.idleTimeoutMs`, `must be a duration in [0, ${String(maxDurationMs)}] ms, got ${describeValue(t)}`);
    }
    if (r.minReplicas > 0 || t !== undefined) out.set(model, { minReplicas: r.minReplicas, idleTimeoutMs: t });
  }
  return out;
}
