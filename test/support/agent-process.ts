import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { repoRootPath } from "../../services/agent/src/backend-sim-catalog.js";
import { liveTaggedSims, pidAlive, simCatalog } from "./agent-harness.js";
import { testPortRange } from "./port-range.js";

const agentMain = fileURLToPath(new URL("../../services/agent/src/main.ts", import.meta.url));

/** A running `node --import tsx services/agent/src/main.ts` process. */
export interface AgentProcess {
  child: ChildProcess;
  pid: number;
  /** AgentService address from its "agent listening" log line. */
  address: string;
  /** Every stdout line so far (pino JSON). */
  lines: string[];
  stderr: string[];
  /** Sends SIGTERM and resolves with the exit code. */
  terminate(): Promise<number | null>;
  exited: Promise<number | null>;
}

/** Writes a YAML config file (JSON is valid YAML). */
export async function writeAgentConfig(path: string, config: Record<string, unknown>): Promise<void> {
  await writeFile(path, JSON.stringify(config, null, 2));
}

/** Starts the agent as its own process and waits for it to listen. */
export async function startAgentProcess(configPath: string, extraArgs: string[] = [], timeoutMs = 30_000, extraEnv: Readonly<Record<string, string>> = {}): Promise<AgentProcess> {
  const child = spawn(process.execPath, ["--import", "tsx", agentMain, "--config", configPath, "--listen", "127.0.0.1:0", ...extraArgs], {
    cwd: repoRootPath,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, LOG_LEVEL: "info", ...extraEnv },
  });
  const lines: string[] = [];
  const stderr: string[] = [];
  const exited = new Promise<number | null>((resolve) => {
    child.once("exit", (code) => {
      resolve(code);
    });
  });
  let buf = "";
  const address = await new Promise<string>((resolve, reject) => {
    const t = setTimeout(() => {
      reject(new Error(`agent did not listen in time; stderr: ${stderr.join("")}`));
    }, timeoutMs);
    child.stdout.setEncoding("utf8").on("data", (d: string) => {
      buf += d;
      const parts = buf.split("\n");
      buf = parts.pop() ?? "";
      for (const l of parts) {
        lines.push(l);
        try {
          const o = JSON.parse(l) as { msg?: string; address?: string };
          if (o.msg === "agent listening" && o.address !== undefined) {
            clearTimeout(t);
            resolve(o.address);
          }
        } catch {
          // not JSON
        }
      }
    });
    child.stderr.setEncoding("utf8").on("data", (d: string) => { stderr.push(d); });
    void exited.then((code) => {
      clearTimeout(t);
      reject(new Error(`agent exited with ${String(code)} before listening; stderr: ${stderr.join("")}`));
    });
  });
  return {
    child,
    pid: child.pid ?? 0,
    address,
    lines,
    stderr,
    exited,
    async terminate() {
      child.kill("SIGTERM");
      return exited;
    },
  };
}

// ---------------------------------------------------------------------------
// A remote agent for the coordinator tests: its own process registered with a
// coordinator (`--coordinator`), its own temp state dir, a random port range,
// distinct labels, backends tagged so a /proc scan finds every one it started.

/** `agent.paused` etc. are driven by signals to the agent's pid only (its backends keep running). */
export interface RemoteAgent {
  readonly nodeId: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly stateDir: string;
  readonly configPath: string;
  /** Tag carried by every backend-sim this agent starts (WARDEN_AGENT_TEST_TAG). */
  readonly tag: string;
  readonly ports: { readonly min: number; readonly max: number };
  /** The current process (changes on restart). */
  readonly proc: AgentProcess;
  readonly pid: number;
  readonly address: string;
  /** SIGTERM; resolves when it exited (backends keep running, by design). */
  stop(): Promise<void>;
  /** SIGKILL; resolves when it exited. */
  kill(): Promise<void>;
  /** SIGSTOP: the agent answers nothing (StopBackend times out, heartbeats stop). */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** Starts a new agent process with the same config and state dir (after stop/kill; kills the old one if still running). */
  restart(): Promise<void>;
  /** Live backend-sim pids this agent (any of its incarnations) started. */
  liveBackends(): Promise<number[]>;
  /** Kills the agent (resumed first), every backend-sim it started, and removes its temp dir. Idempotent. */
  cleanup(): Promise<void>;
}

export interface RemoteAgentOptions {
  /** host:port of the coordinator's NodeService. */
  readonly coordinator: string;
  readonly nodeId: string;
  readonly labels?: Record<string, string>;
  /** Tag prefix of the test file (from uniqueTag); the agent's tag extends it. */
  readonly tag: string;
  /** Extra agent config (merged over the test defaults). */
  readonly config?: Record<string, unknown>;
  /** Extra environment of the agent process (what its backends' allow-list draws from). */
  readonly env?: Readonly<Record<string, string>>;
}

const agentPids = new Set<number>();

/**
 * A backend port range for this test worker (see port-range.ts): below the
 * kernel's ephemeral range and disjoint from other workers' ranges, so no
 * stranger lands in it (a backend would fail to bind, or be reported as an orphan).
 */
export function lowPortRange(size = 16): { min: number; max: number } {
  return testPortRange(size);
}

/** Pids of agent processes started by startRemoteAgent in this test process that still run. */
export async function liveRemoteAgents(): Promise<number[]> {
  const out: number[] = [];
  for (const pid of agentPids) if (await pidAlive(pid)) out.push(pid);
  return out;
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // gone
  }
}

/** Starts an agent process that registers with `o.coordinator`. */
export async function startRemoteAgent(o: RemoteAgentOptions): Promise<RemoteAgent> {
  const dir = await mkdtemp(join(tmpdir(), "warden-remote-agent-"));
  const stateDir = join(dir, "state");
  const configPath = join(dir, "agent.yaml");
  const tag = `${o.tag}-${o.nodeId}`;
  const ports = lowPortRange(16);
  const labels = { node: o.nodeId, ...o.labels };
  await writeAgentConfig(configPath, {
    nodeId: o.nodeId,
    labels,
    stateDir,
    ports: { min: ports.min, max: ports.max, quarantine: "1s" },
    catalog: { "backend-sim": simCatalog(tag) },
    grace: "3s",
    freeTimeout: "1s",
    readiness: { attempts: 100, interval: "200ms", initialInterval: "20ms" },
    nvidiaSmi: "",
    heartbeatInterval: "250ms",
    adoptedPoll: "100ms",
    orphanScanInterval: "1h",
    ...o.config,
  });
  const launch = async (): Promise<AgentProcess> => {
    const p = await startAgentProcess(configPath, ["--coordinator", o.coordinator], 30_000, o.env);
    agentPids.add(p.pid);
    return p;
  };
  let proc = await launch();
  let cleaned = false;
  const waitExit = async (p: AgentProcess): Promise<void> => {
    await p.exited;
  };
  const self: RemoteAgent = {
    nodeId: o.nodeId,
    labels,
    stateDir,
    configPath,
    tag,
    ports,
    get proc() {
      return proc;
    },
    get pid() {
      return proc.pid;
    },
    get address() {
      return proc.address;
    },
    async stop() {
      signal(proc.pid, "SIGCONT");
      signal(proc.pid, "SIGTERM");
      await waitExit(proc);
    },
    async kill() {
      signal(proc.pid, "SIGKILL");
      await waitExit(proc);
    },
    pause() {
      signal(proc.pid, "SIGSTOP");
    },
    resume() {
      signal(proc.pid, "SIGCONT");
    },
    async restart() {
      if (await pidAlive(proc.pid)) {
        signal(proc.pid, "SIGKILL");
        await waitExit(proc);
      }
      proc = await launch();
    },
    liveBackends() {
      return liveTaggedSims(tag);
    },
    async cleanup() {
      if (cleaned) return;
      cleaned = true;
      signal(proc.pid, "SIGKILL");
      signal(proc.pid, "SIGCONT");
      await Promise.race([proc.exited, new Promise((r) => setTimeout(r, 5_000))]);
      for (const pid of await liveTaggedSims(tag)) {
        signal(pid, "SIGCONT");
        signal(pid, "SIGKILL");
      }
      for (let i = 0; i < 100 && (await liveTaggedSims(tag)).length > 0; i++) await new Promise((r) => setTimeout(r, 50));
      await rm(dir, { recursive: true, force: true });
    },
  };
  return self;
}
