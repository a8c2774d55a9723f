import type { ModelSpec } from "@warden/loader";
import { SimRandom } from "../kernel/sim-random.js";
import type { SimNodeSpec } from "./sim-options.js";

/**
 * The replica profile (in the simulation): some seeds configure
 * replicated models — `replicas {min 0..2, max 1..4, targetInFlight 1..3,
 * scaleDownAfter 5-40 s}`, `spread` node or any — and give each node a
 * `maxReplicasPerModel` of 1..3. Every choice comes from its own forked
 * stream (`<options stream>-replicas`), drawn after all the options' other
 * draws, so a seed without the profile draws exactly what it drew before
 * replicas existed: its trace is byte-identical.
 */
export interface ReplicaDraw {
  readonly nodes: SimNodeSpec[];
  readonly models: ModelSpec[];
}

/** Whether `seed` runs the profile (probability `p`), from the profile's own stream. */
export function replicaStream(seed: number, optionsStream: string): SimRandom {
  return new SimRandom(seed).fork(`${optionsStream}-replicas`);
}

/** Replicated models and per-node limits for one seed; at least one model is replicated. */
export function drawReplicas(r: SimRandom, nodes: readonly SimNodeSpec[], models: readonly ModelSpec[]): ReplicaDraw {
  const outNodes = nodes.map((n) => ({ ...n, maxReplicasPerModel: r.int(1, 3) }));
  const chosen = models.map(() => r.chance(0.5));
  if (!chosen.includes(true)) chosen[0] = true;
  const outModels = models.map((m, i) => {
    if (chosen[i] !== true) return m;
    const min = r.int(0, 2);
    const max = Math.max(min, 1, r.int(1, 4));
    return { ...m, replicas: { min, max, targetInFlight: r.int(1, 3), scaleDownAfterMs: r.int(5, 40) * 1_000 }, spread: r.pick(["node", "any"] as const) };
  });
  // Routing, from its own stream (`-routing`): a seed draws the replicas it drew before prefix routing existed.
  const rr = r.fork("routing");
  return { nodes: outNodes, models: outModels.map((m) => (isReplicated(m) && rr.chance(0.5) ? { ...m, routing: { mode: "prefix" as const, balanceMarginCalls: rr.int(0, 3) } } : m)) };
}

/** A model runs as replicas in this config (more than one may exist, or a floor keeps some). */
export function isReplicated(m: ModelSpec): boolean {
  return m.replicas.max > 1 || m.replicas.min > 0;
}
