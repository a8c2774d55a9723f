/**
 * A coordinator as its own process (`node --import tsx services/coordinator/src/main.ts`),
 * so a test can kill it with SIGKILL — no close, no flush — and start another
 * on the same state dir and address. Its audit events are read from its log
 * (one `event <type>` line per event, the event as JSON), which covers the
 * events it emits while starting, before any WatchEvents stream could attach.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { appendFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { repoRootPath } from "../../services/agent/src/backend-sim-catalog.js";
import { createClient } from "@warden/grpc";
import { AdminService } from "@warden/proto";

const coordinatorMain = fileURLToPath(new URL("../../services/coordinator/src/main.ts", import.meta.url));
const cliMain = fileURLToPath(new URL("../../services/cli/src/main.ts", import.meta.url));

/** An event as the coordinator logs it (proto JSON plus its type). */
export interface LoggedEvent {
  readonly type: string;
  readonly nodeId?: string;
  readonly model?: string;
  readonly incarnation?: string;
  readonly [payload: string]: unknown;
}

export interface CoordinatorProcess {
  readonly child: ChildProcess;
  readonly pid: number;
  /** host:port it listens on. */
  readonly address: string;
  /** host:port of its HTTP listener, when `httpListen` is set. */
  readonly httpAddress: string | undefined;
  /** Every event it logged so far. */
  readonly events: LoggedEvent[];
  /** Every JSON log line it wrote to stdout, parsed. */
  readonly logLines: Readonly<Record<string, unknown>>[];
  readonly stderr: string[];
  /** Resolves with the first logged event of `type` matching `pred` (already logged or future). */
  waitForEvent(type: string, pred?: (e: LoggedEvent) => boolean, timeoutMs?: number): Promise<LoggedEvent>;
  /** SIGKILL; resolves once it exited. */
  kill(): Promise<void>;
  readonly exited: Promise<number | null>;
}

/** Writes the config (JSON is valid YAML) and starts the coordinator; resolves once it listens. */
export async function startCoordinatorProcess(configPath: string, config: Record<string, unknown>, timeoutMs = 60_000, o: { readonly via?: "coordinator" | "warden-up" | "bundle"; /** Options for the coordinator's node (e.g. the installed unit's). */ readonly nodeFlags?: readonly string[]; /** Another checkout's coordinator (a benchmark's baseline: an earlier commit, its node_modules in place). */ readonly checkout?: string } = {}): Promise<CoordinatorProcess> {
  await writeFile(configPath, JSON.stringify(config, null, 2));
  // "warden-up": the CLI's `warden up --config` from source, not the coordinator's own entry point.
  // "bundle": `warden up --config` as `npm start` runs it — the bin, which rebuilds a stale bundle and runs the
  // esbuild bundle with no TypeScript loader: what ships, for benchmarks that measure what an operator runs.
  const root = o.checkout ?? repoRootPath;
  const main = o.checkout === undefined ? coordinatorMain : join(o.checkout, "services/coordinator/src/main.ts");
  const argv = o.via === "bundle" ? [join(root, "services/cli/bin/warden.js"), "up", "--config", configPath] : o.via === "warden-up" ? [cliMain, "up", "--config", configPath] : [main, "--config", configPath];
  const loader = o.via === "bundle" ? [] : ["--import", "tsx"];
  // WARDEN_BENCH_CPU_PROF_DIR: a V8 CPU profile of the coordinator, written there when it exits (benchmarks).
  const profDir = process.env.WARDEN_BENCH_CPU_PROF_DIR;
  // WARDEN_BENCH_RAW_STDOUT: a file the coordinator's stdout lines that are not its JSON log are appended to (benchmarks).
  const rawStdout = process.env.WARDEN_BENCH_RAW_STDOUT === "" ? undefined : process.env.WARDEN_BENCH_RAW_STDOUT;
  const prof = profDir === undefined || profDir === "" ? [] : ["--cpu-prof", "--cpu-prof-dir", profDir];
  const child = spawn(process.execPath, [...prof, ...(o.nodeFlags ?? []), ...loader, ...argv], {
    cwd: root,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, LOG_LEVEL: "info" },
  });
  const events: LoggedEvent[] = [];
  const logLines: Record<string, unknown>[] = [];
  const stderr: string[] = [];
  const waiters = new Set<() => void>();
  const exited = new Promise<number | null>((resolve) => {
    child.once("exit", (code) => {
      resolve(code);
    });
  });
  let buf = "";
  let httpAddress: string | undefined;
  const address = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(new Error(`coordinator did not listen in time; stderr: ${stderr.join("")}`));
    }, timeoutMs);
    child.stdout.setEncoding("utf8").on("data", (d: string) => {
      buf += d;
      const parts = buf.split("\n");
      buf = parts.pop() ?? "";
      for (const line of parts) {
        let o: { msg?: string; address?: string; httpAddress?: string; event?: LoggedEvent };
        try {
          o = JSON.parse(line) as typeof o;
        } catch {
          // Not the JSON log (V8's --trace-gc-nvp lines, say): kept in a file when a benchmark asks.
          if (rawStdout !== undefined) appendFileSync(rawStdout, `${line}\n`);
          continue;
        }
        logLines.push(o);
        if (o.msg === "coordinator listening" && o.address !== undefined) {
          httpAddress = o.httpAddress;
          clearTimeout(timer);
          resolve(o.address);
        }
        if (o.msg?.startsWith("event ") === true && o.event !== undefined) {
          events.push(o.event);
          for (const w of waiters) w();
        }
      }
    });
    child.stderr.setEncoding("utf8").on("data", (d: string) => {
      stderr.push(d);
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`coordinator exited with ${String(code)} before listening; stderr: ${stderr.join("")}`));
    });
  });
  return {
    child,
    pid: child.pid ?? 0,
    address,
    httpAddress,
    events,
    logLines,
    stderr,
    exited,
    waitForEvent(type, pred = () => true, waitMs = 30_000) {
      return new Promise<LoggedEvent>((resolve, reject) => {
        const check = (): void => {
          const hit = events.find((e) => e.type === type && pred(e));
          if (hit === undefined) return;
          waiters.delete(check);
          clearTimeout(timer);
          resolve(hit);
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`no ${type} event within ${String(waitMs)}ms; saw: ${events.map((e) => e.type).join(", ")}`));
        }, waitMs);
        waiters.add(check);
        check();
      });
    },
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
  };
}

/**
 * Unloads every model a coordinator process lists, for a test's teardown before
 * it kills the process: an agent (the embedded one too) leaves its backends
 * running when it is killed, so they would outlive the test (and sit in the
 * next file's port range). Errors are ignored: teardown goes on.
 */
export async function unloadEverything(address: string, headers: Readonly<Record<string, string>> = {}): Promise<void> {
  const admin = createClient(AdminService, address, { headers });
  try {
    const listed = await admin.listModels({ pageSize: 1_000 }, { timeoutMs: 10_000 }).catch(() => undefined);
    const models = new Set((listed?.instances ?? []).map((i) => i.model));
    for (const model of models) await admin.unloadModel({ model, force: true }, { timeoutMs: 30_000 }).catch(() => undefined);
  } finally {
    admin.close();
  }
}
