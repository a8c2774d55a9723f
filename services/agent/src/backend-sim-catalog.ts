import { fileURLToPath } from "node:url";
import type { CatalogEntry } from "./agent-config.js";

/** Absolute path of backend-sim's entry point in this checkout. */
export const backendSimMainPath: string = fileURLToPath(new URL("../../backend-sim/src/main.ts", import.meta.url));

/** Repository root (where node_modules/tsx resolves for `--import tsx`). */
export const repoRootPath: string = fileURLToPath(new URL("../../../", import.meta.url));

/**
 * The catalog entry that runs backend-sim as `node --import tsx <main.ts>`: one
 * pid per backend (stack.md G10). `extraEnv` adds fixed environment values (tests
 * tag their processes this way).
 */
export function backendSimCatalogEntry(extraEnv: Readonly<Record<string, string>> = {}): CatalogEntry {
  return {
    command: process.execPath,
    args: ["--import", "tsx", backendSimMainPath],
    env: { ...extraEnv },
    envAllow: ["PATH", "HOME", "TMPDIR", "LANG", "SIM_*"],
    cwd: repoRootPath,
  };
}

/** Builtins selectable in YAML with `builtin: backend-sim`. */
export const builtinCatalog = { "backend-sim": () => backendSimCatalogEntry() } as const;
