import { existsSync } from "node:fs";
import { isAbsolute } from "node:path";
import { fileURLToPath } from "node:url";
import type { CatalogEntry } from "./catalog-entry.js";

/**
 * Whether this code runs from the built bundle (services/cli/dist, or an
 * installed `warden` package) rather than from the TypeScript sources: the
 * bundle's files all sit in one directory, next to `backend-sim.js`.
 */
const bundled = !import.meta.url.endsWith(".ts");

/** Absolute path of backend-sim's entry point: the built one next to this bundle, or the source in this checkout. */
export const backendSimMainPath: string = fileURLToPath(new URL(bundled ? "./backend-sim.js" : "../../backend-sim/src/main.ts", import.meta.url));

/** Where backend-sim runs: the bundle's directory, or the repository root (where node_modules/tsx resolves for `--import tsx`). */
export const repoRootPath: string = fileURLToPath(new URL(bundled ? "./" : "../../../", import.meta.url));

/**
 * From sources, `WARDEN_BACKEND_SIM_BUNDLE` may name an already built
 * backend-sim bundle (an absolute path to an existing file) to run instead of
 * the sources through tsx. The test runner sets it to the dist it has just
 * built: tsx costs each backend about a second of CPU at start, and the suite
 * starts hundreds of them on two cores. Ignored when this code is the bundle.
 */
const prebuiltSim = ((): string | undefined => {
  const p = process.env["WARDEN_BACKEND_SIM_BUNDLE"];
  return !bundled && p !== undefined && isAbsolute(p) && existsSync(p) ? p : undefined;
})();

/**
 * The catalog entry that runs backend-sim — `node <dist>/backend-sim.js` when
 * built, `node --import tsx <main.ts>` from sources: one pid per backend
 * (stack.md G10). `extraEnv` adds fixed environment values (tests tag their
 * processes this way).
 */
export function backendSimCatalogEntry(extraEnv: Readonly<Record<string, string>> = {}): CatalogEntry {
  return {
    command: process.execPath,
    args: bundled ? [backendSimMainPath] : prebuiltSim !== undefined ? [prebuiltSim] : ["--import", "tsx", backendSimMainPath],
    env: { ...extraEnv },
    envAllow: ["PATH", "HOME", "TMPDIR", "LANG", "SIM_*"],
    cwd: repoRootPath,
    profile: "plain",
  };
}

/** Builtins selectable in YAML with `builtin: backend-sim`. */
export const builtinCatalog = { "backend-sim": () => backendSimCatalogEntry() } as const;
