import { spawn, type ChildProcess } from "node:child_process";
import type { Cancel, Clock } from "@warden/common";
import { isSameProcessAlive } from "./proc-fs.js";

/** How a backend process ended. exitCode and signal are unknown (null / "") for adopted processes. */
export interface ExitInfo {
  exitCode: number | null;
  signal: string;
}

/**
 * A backend process the agent can signal and whose end it can observe: either a
 * child it spawned, or a process adopted from a record after an agent restart
 * (not our child, so its end is observed by polling /proc).
 */
export interface ProcessHandle {
  readonly pid: number;
  readonly adopted: boolean;
  /** Resolves once, when the process is gone (a child: reaped). */
  readonly exited: Promise<ExitInfo>;
  /**
   * Sends `sig` to the backend's whole process group (each backend leads its
   * own group: spawn with detached), so helpers it forked go too.
   */
  signalGroup(sig: NodeJS.Signals): void;
  /** Stops watching without touching the process, so the agent can exit and leave it running. */
  detach(): void;
}

function killGroup(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(-pid, sig);
  } catch {
    try {
      process.kill(pid, sig);
    } catch {
      // already gone
    }
  }
}

export interface SpawnSpec {
  command: string;
  args: readonly string[];
  env: Readonly<Record<string, string>>;
  cwd: string | undefined;
  stdoutFd: number;
  stderrFd: number;
}

/** Result of spawn(): a handle, or the error when no process was created (ENOENT, EACCES, ...). */
export type SpawnResult = { ok: true; handle: ProcessHandle } | { ok: false; error: Error };

/**
 * Spawns with an argument array and no shell, as the leader of its own process
 * group, stdin closed, stdout/stderr into the given files. Resolves as soon as
 * the pid is known, or with the error when spawn failed.
 */
export function spawnBackend(spec: SpawnSpec): Promise<SpawnResult> {
  return new Promise((resolve) => {
    let child: ChildProcess;
    try {
      child = spawn(spec.command, [...spec.args], { cwd: spec.cwd, env: { ...spec.env }, detached: true, shell: false, stdio: ["ignore", spec.stdoutFd, spec.stderrFd] });
    } catch (err) {
      resolve({ ok: false, error: err instanceof Error ? err : new Error(String(err)) });
      return;
    }
    const pid = child.pid;
    if (pid === undefined) {
      child.once("error", (error) => {
        resolve({ ok: false, error });
      });
      return;
    }
    child.on("error", () => {
      // errors after a successful spawn (e.g. kill racing exit) are covered by "exit"
    });
    const exited = new Promise<ExitInfo>((done) => {
      child.once("exit", (code, signal) => {
        done({ exitCode: code, signal: signal ?? "" });
      });
    });
    resolve({
      ok: true,
      handle: {
        pid,
        adopted: false,
        exited,
        signalGroup: (sig) => {
          killGroup(pid, sig);
        },
        detach: () => {
          child.unref();
        },
      },
    });
  });
}

/**
 * A handle on a process adopted from a record. Its end is seen by polling
 * /proc (pid and start time) every `pollMs`, and soon after each signal.
 */
export function adoptProcess(pid: number, pidStartTime: string, pollMs: number, clock: Clock, procRoot = "/proc"): ProcessHandle {
  let cancel: Cancel = () => {};
  let detached = false;
  let resolveExit: (info: ExitInfo) => void = () => {};
  const exited = new Promise<ExitInfo>((done) => {
    resolveExit = done;
  });
  let gone = false;
  const schedule = (delayMs: number): void => {
    cancel();
    if (detached || gone) return;
    cancel = clock.setTimer(delayMs, () => void check());
  };
  const check = async (): Promise<void> => {
    if (detached || gone) return;
    if (!(await isSameProcessAlive(pid, pidStartTime, procRoot))) {
      gone = true;
      cancel();
      resolveExit({ exitCode: null, signal: "" });
      return;
    }
    schedule(pollMs);
  };
  void check();
  return {
    pid,
    adopted: true,
    exited,
    signalGroup(sig) {
      killGroup(pid, sig);
      // the process usually dies within milliseconds of a signal: look sooner
      schedule(Math.min(pollMs, 20));
    },
    detach() {
      detached = true;
      cancel();
    },
  };
}
