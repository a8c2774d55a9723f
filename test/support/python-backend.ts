/**
 * The Python compatibility backend (test/compat/python-backend/backend.py),
 * laid out the way LocalAI installs a Python backend: one directory holding
 * `run.sh`, `backend.py` and the stubs generated from backend.proto — here
 * generated at test time from Warden's proto/backend/backend.proto with
 * Debian's protoc and grpc_python_plugin, so a drift between the TypeScript
 * and the Python view of the wire contract shows up as a failing test.
 * Needs /usr/bin/protoc, /usr/bin/grpc_python_plugin and /usr/bin/python3 with
 * grpcio + protobuf (.ci/run installs them from apt).
 */
import { execFile } from "node:child_process";
import { chmod, copyFile, readFile, readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { pidAlive } from "./agent-harness.js";

const run = promisify(execFile);

/** Debian's interpreter: grpcio comes from python3-grpcio, not from the pyenv `python3` that may be first on PATH. */
export const systemPython = "/usr/bin/python3";
export const protoc = "/usr/bin/protoc";
export const grpcPythonPlugin = "/usr/bin/grpc_python_plugin";

const protoDir = fileURLToPath(new URL("../../proto/backend", import.meta.url));
const backendSource = fileURLToPath(new URL("../compat/python-backend/backend.py", import.meta.url));

export interface PythonBackend {
  /** The backend's directory (LocalAI: <backends>/<name>/). */
  readonly dir: string;
  /** Absolute path of its `run.sh`: what a catalog entry's command names. */
  readonly command: string;
  readonly script: string;
}

/** Generates the stubs into `dir` and writes the backend there with a LocalAI-style `run.sh`. */
export async function preparePythonBackend(dir: string): Promise<PythonBackend> {
  await run(protoc, [`-I${protoDir}`, `--python_out=${dir}`, `--grpc_python_out=${dir}`, `--plugin=protoc-gen-grpc_python=${grpcPythonPlugin}`, join(protoDir, "backend.proto")]);
  const script = join(dir, "backend.py");
  await copyFile(backendSource, script);
  const command = join(dir, "run.sh");
  // As LocalAI's run.sh: the backend's own interpreter on its own script, argv passed through untouched.
  await writeFile(command, `#!/bin/sh\nexec ${systemPython} "$(dirname "$0")/backend.py" "$@"\n`);
  await chmod(command, 0o755);
  return { dir, command, script };
}

/** What backend.py wrote to $COMPAT_RECORD_DIR/<pid>.json. */
export interface BackendRecordFile {
  argv: string[];
  cwd: string;
  env: Record<string, string>;
  ppid: number;
  pid: number;
  loadModel?: Record<string, unknown>;
  freed?: boolean;
}

export async function readBackendRecord(recordDir: string, pid: number): Promise<BackendRecordFile | undefined> {
  try {
    return JSON.parse(await readFile(join(recordDir, `${String(pid)}.json`), "utf8")) as BackendRecordFile;
  } catch {
    return undefined;
  }
}

/** Live processes running `script` (the backend's python, its run.sh already exec'd away). */
export async function livePythonBackends(script: string): Promise<number[]> {
  const out: number[] = [];
  for (const d of await readdir("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const cmd = await readFile(`/proc/${d}/cmdline`, "utf8");
      if (cmd.split("\0").includes(script) && (await pidAlive(Number(d)))) out.push(Number(d));
    } catch {
      // gone
    }
  }
  return out;
}
