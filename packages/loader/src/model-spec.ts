import type { LoadSettings } from "@warden/common";

/** One model from the config, as the loader needs it. */
export interface ModelSpec {
  readonly id: string;
  /** Catalog backend name on the agents. */
  readonly backend: string;
  readonly options: readonly string[];
  readonly modelFile: string;
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
}

/** Defaults for fields an operator may leave out. */
export function modelSpec(init: Partial<ModelSpec> & Pick<ModelSpec, "id" | "backend">): ModelSpec {
  return {
    options: [],
    modelFile: "",
    contextSize: 0,
    load: {},
    groups: [],
    pinned: false,
    sizeBytes: 0,
    selector: {},
    loadTimeoutMs: 600_000,
    ...init,
  };
}
