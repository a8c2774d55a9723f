import type { ArtifactSpec, LoadSettings } from "@warden/common";

/** One model from the config, as the loader needs it. */
export interface ModelSpec {
  readonly id: string;
  /** Catalog backend name on the agents. */
  readonly backend: string;
  readonly options: readonly string[];
  readonly modelFile: string;
  /** Files the agent pulls by digest before the start (services/agent/docs/artifacts.md); empty = none. */
  readonly artifacts: readonly ArtifactSpec[];
  readonly contextSize: number;
  /** The typed LoadModel fields LocalAI sends; unset ones get LocalAI's defaults at the agent. */
  readonly load: LoadSettings;
  readonly groups: readonly string[];
  readonly pinned: boolean;
  /** Memory estimate in bytes; 0 when unknown. */
  readonly sizeBytes: number;
  /** Node labels that must match for placement. */
  readonly selector: Readonly<Record<string, string>>;
  /** DESIGN §5: 10 min by default. */
  readonly loadTimeoutMs: number;
  /** How many instances of the model may run. The default, min 0 / max 1, is one instance loaded on demand. */
  readonly replicas: ReplicaSettings;
  /** Anti-affinity between the model's replicas. */
  readonly spread: SpreadMode;
  /**
   * Per-model idle timeout overriding the policy's (llama-swap's `ttl`,
   * Ollama's `keep_alive`); 0 = never idle-evicted; undefined = the policy's.
   */
  readonly idleTimeoutMs: number | undefined;
  /** How a call picks among the model's ready replicas. */
  readonly routing: ModelRouting;
}

/**
 * `least-in-flight` (the default): the replica with the fewest calls in
 * flight, ties by least recently used. `prefix`: the replica most likely to
 * hold the prompt's prefix in its cache, unless its calls in flight exceed
 * the least loaded one's by more than `balanceMarginCalls`
 * (services/coordinator/docs/routing.md).
 */
export type ModelRouting = { readonly mode: "least-in-flight" } | { readonly mode: "prefix"; readonly balanceMarginCalls: number };

export const defaultRouting: ModelRouting = Object.freeze({ mode: "least-in-flight" });

/**
 * `min` replicas are kept ready by the reconciler (0 = loaded on demand);
 * a scale-up starts when every ready replica has `targetInFlight` calls in
 * flight and fewer than `max` exist; a replica idle for `scaleDownAfterMs`
 * is stopped while more than `min` exist.
 */
export interface ReplicaSettings {
  readonly min: number;
  readonly max: number;
  readonly targetInFlight: number;
  readonly scaleDownAfterMs: number;
}

/**
 * `node`: never two replicas of the model on one node; `gpu`: never two on
 * one GPU device (one node may hold several on different devices); `any`:
 * prefer a node (then a device) without one, fall back to one that has one.
 */
export type SpreadMode = "node" | "gpu" | "any";

/** Bounds of `replicas` (documented in the README's bounds table). */
export const replicaBounds = Object.freeze({ maxReplicas: 1024, maxTargetInFlight: 65_536, maxScaleDownAfterMs: 30 * 24 * 3_600_000 });

export const defaultReplicas: ReplicaSettings = Object.freeze({ min: 0, max: 1, targetInFlight: 4, scaleDownAfterMs: 300_000 });

/** Defaults for fields an operator may leave out. */
export function modelSpec(init: Partial<ModelSpec> & Pick<ModelSpec, "id" | "backend">): ModelSpec {
  return {
    options: [],
    modelFile: "",
    artifacts: [],
    contextSize: 0,
    load: {},
    groups: [],
    pinned: false,
    sizeBytes: 0,
    selector: {},
    loadTimeoutMs: 600_000,
    replicas: defaultReplicas,
    spread: "any",
    idleTimeoutMs: undefined,
    routing: defaultRouting,
    ...init,
  };
}

const revisions = new WeakMap<ModelSpec, string>();

/**
 * The revision of a model's load settings: every field that reaches
 * StartBackend/LoadModel (backend, model file, context size, options, the
 * typed load fields), as one stable string. Replica settings, groups, pins,
 * size, selector and idle settings are left out: they apply live without a
 * restart. Two specs with equal revisions start the same process; a running
 * instance started with another revision is rolled out (replica-tick.ts).
 * Cached per spec object (spec objects are immutable).
 */
export function loadRevision(spec: ModelSpec): string {
  let r = revisions.get(spec);
  if (r === undefined) {
    const load = Object.fromEntries(Object.entries(spec.load).filter(([, v]) => v !== undefined).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    // Artifacts only when listed: a revision without them stays what it was.
    r = JSON.stringify([spec.backend, spec.modelFile, spec.contextSize, spec.options, load, ...(spec.artifacts.length === 0 ? [] : [spec.artifacts.map((a) => [a.sha256, a.path])])]);
    revisions.set(spec, r);
  }
  return r;
}
