/**
 * An HA member as its own process: the real CLI, `warden coordinator --config F
 * --ha`, so a test can kill -9 it. Resolves once it announced itself ("ha
 * member started"); every JSON log line is kept (its events too).
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { repoRootPath } from "../../services/agent/src/backend-sim-catalog.js";

const cliMain = fileURLToPath(new URL("../../services/cli/src/main.ts", import.meta.url));

export interface HaCoordinatorProcess {
  readonly child: ChildProcess;
  readonly holder: string;
  /** The listen address (also the advertised one in these tests). */
  readonly address: string;
  readonly lines: Record<string, unknown>[];
  /** The first log line matching `pred` (already logged or future), or a rejection at the deadline. */
  waitForLine(what: string, pred: (l: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<Record<string, unknown>>;
  kill(): Promise<void>;
}

const live = new Set<ChildProcess>();
process.on("exit", () => {
  for (const c of live) c.kill("SIGKILL");
});

/** `onLine` sees every JSON log line as it comes, before the member has started too. */
export async function startHaCoordinator(configPath: string, config: Record<string, unknown>, extraArgs: readonly string[] = [], timeoutMs = 60_000, onLine?: (l: Record<string, unknown>) => void): Promise<HaCoordinatorProcess> {
  await writeFile(configPath, JSON.stringify(config, null, 2));
  const child = spawn(process.execPath, ["--import", "tsx", cliMain, "coordinator", "--config", configPath, "--ha", "--log-json", ...extraArgs], {
    cwd: repoRootPath,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, WARDEN_QUIET_BANNER: "1" },
  });
  live.add(child);
  const exited = new Promise<void>((resolve) => {
    child.once("exit", () => {
      live.delete(child);
      resolve();
    });
  });
  const lines: Record<string, unknown>[] = [];
  const waiters = new Set<() => void>();
  const stderr: string[] = [];
  let buf = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => {
    buf += d;
    const parts = buf.split("\n");
    buf = parts.pop() ?? "";
    for (const line of parts) {
      if (!line.startsWith("{")) continue;
      try {
        lines.push(JSON.parse(line) as Record<string, unknown>);
      } catch {
        continue;
      }
      onLine?.(lines[lines.length - 1]!);
      for (const w of [...waiters]) w();
    }
  });
  child.stderr.setEncoding("utf8").on("data", (d: string) => {
    stderr.push(d);
  });
  let gone = false;
  void exited.then(() => {
    gone = true;
    for (const w of [...waiters]) w();
  });
  const waitForLine = (what: string, pred: (l: Record<string, unknown>) => boolean, waitMs = 30_000): Promise<Record<string, unknown>> =>
    new Promise((resolve, reject) => {
      const check = (): void => {
        const hit = lines.find(pred);
        if (hit !== undefined) {
          done();
          resolve(hit);
        } else if (gone) {
          done();
          reject(new Error(`coordinator exited before ${what}; stderr: ${stderr.join("").slice(-2000)}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`no ${what} within ${String(waitMs)} ms; stderr: ${stderr.join("").slice(-2000)}`));
      }, waitMs);
      const done = (): void => {
        clearTimeout(timer);
        waiters.delete(check);
      };
      waiters.add(check);
      check();
    });
  const started = await waitForLine("ha member started", (l) => l["msg"] === "ha member started", timeoutMs);
  return {
    child,
    holder: String(started["holder"]),
    address: String(config["listen"]),
    lines,
    waitForLine,
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
  };
}

/** `warden ha status --json --addr <addr>` through the real CLI: its parsed output, or the CLI's failure. */
export function cliHaStatus(addr: string): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ["--import", "tsx", cliMain, "ha", "status", "--json", "--addr", addr, "--timeout", "10s"], { cwd: repoRootPath, timeout: 60_000 }, (err, stdout, stderr) => {
      if (err !== null) {
        reject(new Error(`warden ha status failed: ${stderr}`));
        return;
      }
      resolve(JSON.parse(stdout) as Record<string, unknown>);
    });
  });
}
