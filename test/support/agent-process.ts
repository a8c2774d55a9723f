import { spawn, type ChildProcess } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { repoRootPath } from "../../services/agent/src/backend-sim-catalog.js";

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
export async function startAgentProcess(configPath: string, extraArgs: string[] = [], timeoutMs = 30_000): Promise<AgentProcess> {
  const child = spawn(process.execPath, ["--import", "tsx", agentMain, "--config", configPath, "--listen", "127.0.0.1:0", ...extraArgs], {
    cwd: repoRootPath,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, LOG_LEVEL: "info" },
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
