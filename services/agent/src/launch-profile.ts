import { dirname } from "node:path";
import { invalidArgument } from "@warden/common";

/**
 * How a catalog entry's processes are launched.
 * - `plain`: the catalog's args, then `--addr host:port`; only the allow-list of
 *   the agent's environment; the catalog's cwd (or the agent's).
 * - `localai`: as LocalAI's own launcher does it (pkg/model/process.go,
 *   initializers.go): argv is `--addr host:port` and nothing else, the working
 *   directory is the executable's, the environment LocalAI gives (below), and
 *   readiness waits for Health to answer "OK".
 */
export type LaunchProfile = "plain" | "localai";

export const launchProfiles: readonly LaunchProfile[] = ["plain", "localai"];

/**
 * The agent's variables a `localai` backend gets besides the catalog's own
 * envAllow. LocalAI passes its whole environment; Warden passes what backends
 * use — the loader's search path, the home directory, the GPU runtime's and
 * Hugging Face's settings — and still withholds the rest (LD_PRELOAD, tokens).
 */
export const localaiEnvAllow: readonly string[] = ["PATH", "HOME", "LD_LIBRARY_PATH", "CUDA_*", "NVIDIA_*", "HF_*"];

/** Variables LocalAI points at the models path unless its own environment sets them. */
export const hfCacheVars: readonly string[] = ["HF_HOME", "TRANSFORMERS_CACHE", "HUGGINGFACE_HUB_CACHE"];

/** Upstream backends exit ~2 s after their parent dies unless this is false (Go, C++ and Python alike). */
export const parentWatchVar = "LOCALAI_BACKEND_PARENT_WATCH";

/**
 * Config-time checks of a `localai` entry. `field` is the entry's path. An
 * upstream backend parses its argv with getopt (llama-cpp), Go's flag or
 * Python's argparse and exits on anything but `--addr`, so extra args would only
 * show up as a start that fails before ready: refuse them here instead.
 */
export function checkLocalaiEntry(field: string, args: readonly string[], env: Readonly<Record<string, string>>): void {
  if (args.length > 0) {
    throw invalidArgument(`${field}.args`, `profile localai: upstream backends accept only --addr (they exit on ${JSON.stringify(args[0]?.slice(0, 64))}); set threads, gpuLayers, contextSize… on the model, or backend options in its options list`);
  }
  if (Object.hasOwn(env, parentWatchVar)) {
    throw invalidArgument(`${field}.env.${parentWatchVar}`, "profile localai: the agent sets it to false, so its backends outlive an agent restart and are adopted");
  }
}

/** The working directory of a `localai` process: its executable's (LocalAI: filepath.Dir of the backend). */
export function localaiCwd(command: string): string {
  return dirname(command);
}

/**
 * What a `localai` process's environment adds over the allow-list: the HF
 * cache variables at the models path (an agent's own non-empty value wins, as
 * in LocalAI's `os.Getenv(name) == ""` check) and the parent watch off.
 */
export function localaiEnv(source: Readonly<Record<string, string | undefined>>, modelsPath: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const name of hfCacheVars) {
    const own = source[name];
    env[name] = own === undefined || own === "" ? modelsPath : own;
  }
  env[parentWatchVar] = "false";
  return env;
}
