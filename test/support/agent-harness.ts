import { mkdtemp, readFile, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cryptoRng, createUlidFactory, nullLogger, systemClock, type Logger } from "@warden/common";
import { GrpcServer, createClient, type Client } from "@warden/grpc";
import { AgentService, type StartBackendResponse } from "@warden/proto";
import { backendSimCatalogEntry, builtinCatalog, createAgent, resolveAgentConfig, type Agent, type AgentConfig, type AgentDeps } from "../../services/agent/src/index.js";
import { testPortRange } from "./port-range.js";

/** Env var every backend spawned by these tests carries, so leak checks count only our processes. */
export const testTagVar = "WARDEN_AGENT_TEST_TAG";

export const newIncarnation: () => string = createUlidFactory(systemClock, cryptoRng);

/** A backend port range of `size` ports for this test worker (see port-range.ts). */
export function randomPortRange(size: number): { min: number; max: number } {
  return testPortRange(size);
}

export function uniqueTag(name: string): string {
  return `${name}-${String(process.pid)}-${Math.random().toString(36).slice(2, 10)}`;
}

/** The catalog input for backend-sim, tagged. */
export function simCatalog(tag: string, extraEnv: Record<string, string> = {}): Record<string, unknown> {
  const e = backendSimCatalogEntry({ [testTagVar]: tag, ...extraEnv });
  return { command: e.command, args: [...e.args], env: { ...e.env }, envAllow: [...e.envAllow].filter((n) => n !== "SIM_*"), cwd: e.cwd };
}

export interface AgentHarness {
  agent: Agent;
  config: AgentConfig;
  server: GrpcServer;
  address: string;
  client: Client<typeof AgentService>;
  stateDir: string;
  tag: string;
  close(options?: { stopBackends?: boolean }): Promise<void>;
}

/** A temp state dir that is removed by the returned cleanup. */
export async function tempDir(prefix: string): Promise<string> {
  return mkdtemp(join(tmpdir(), `${prefix}-`));
}

/**
 * An in-process agent served over real loopback gRPC, spawning backend-sim
 * tagged with `tag`. `configOverrides` are merged into the config input.
 */
export async function startAgentHarness(opts: { tag: string; ports: { min: number; max: number }; config?: Record<string, unknown>; catalog?: Record<string, unknown>; deps?: AgentDeps; logger?: Logger; stateDir?: string }): Promise<AgentHarness> {
  const stateDir = opts.stateDir ?? (await tempDir("warden-agent-state"));
  const config = resolveAgentConfig(
    {
      nodeId: "test-node",
      stateDir,
      ports: { min: opts.ports.min, max: opts.ports.max, quarantine: "0s" },
      catalog: { sim: simCatalog(opts.tag), ...opts.catalog },
      grace: "3s",
      readiness: { attempts: 60, interval: "500ms", initialInterval: "25ms" },
      nvidiaSmi: "",
      orphanScanInterval: "1h",
      adoptedPoll: "100ms",
      ...opts.config,
    },
    builtinCatalog,
  );
  const agent = createAgent(config, { logger: opts.logger ?? nullLogger, ...opts.deps });
  await agent.start();
  const server = new GrpcServer();
  server.add(AgentService, agent.service);
  const { address } = await server.listen("127.0.0.1:0");
  const client = createClient(AgentService, address);
  return {
    agent,
    config,
    server,
    address,
    client,
    stateDir,
    tag: opts.tag,
    async close(o = {}) {
      client.close();
      await server.shutdown(1_000);
      await agent.close({ stopBackends: o.stopBackends ?? true });
      if (opts.stateDir === undefined) await rm(stateDir, { recursive: true, force: true });
    },
  };
}

/** Collects a StartBackend stream to its end. */
export async function collectStart(client: Client<typeof AgentService>, req: { incarnation: string; model: string; backend?: string; options?: string[]; gpuDevice?: string }, timeoutMs = 30_000): Promise<StartBackendResponse[]> {
  const out: StartBackendResponse[] = [];
  for await (const ev of client.startBackend({ backend: "sim", ...req }, { timeoutMs })) out.push(ev);
  return out;
}

/** The event cases of a start stream, e.g. ["spawned", "loading", "ready"]. */
export function cases(events: readonly StartBackendResponse[]): string[] {
  return events.map((e) => e.event.case ?? "none");
}

/** Starts a backend and returns its ready address and pid (throws if it did not become ready). */
export async function startReady(client: Client<typeof AgentService>, model: string, options: string[] = [], incarnation = newIncarnation()): Promise<{ incarnation: string; address: string; pid: number }> {
  const events = await collectStart(client, { incarnation, model, options });
  const last = events[events.length - 1];
  if (last?.event.case !== "ready") throw new Error(`start did not become ready: ${JSON.stringify(events.map((e) => e.event))}`);
  return { incarnation, address: last.event.value.address, pid: last.event.value.pid };
}

/** Polls `fn` until it returns a truthy value or `timeoutMs` passes (then throws with `what`). */
export async function waitFor<T>(what: string, fn: () => T | Promise<T>, timeoutMs = 20_000, intervalMs = 25): Promise<NonNullable<T>> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== null && v !== false) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** True when pid runs and is not a zombie. */
export async function pidAlive(pid: number): Promise<boolean> {
  try {
    const stat = await readFile(`/proc/${String(pid)}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

/** Live (non-zombie) backend-sim processes carrying `WARDEN_AGENT_TEST_TAG=<tag-prefix...>`. */
export async function liveTaggedSims(tagPrefix: string): Promise<number[]> {
  const out: number[] = [];
  for (const d of await readdir("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const cmd = await readFile(`/proc/${d}/cmdline`, "utf8");
      // From sources through tsx, or the prebuilt bundle the test runner names (WARDEN_BACKEND_SIM_BUNDLE).
      if (!cmd.includes("backend-sim/src/main.ts") && !cmd.includes("/backend-sim.js")) continue;
      const env = await readFile(`/proc/${d}/environ`, "utf8");
      if (!env.split("\0").some((kv) => kv.startsWith(`${testTagVar}=${tagPrefix}`))) continue;
      if (await pidAlive(Number(d))) out.push(Number(d));
    } catch {
      // gone or not ours
    }
  }
  return out;
}

/**
 * A test file's cleanup, after its leak check: SIGKILL the agents it started
 * that still run, and the given backend pids (their process group first,
 * else the process), so no file leaves processes behind even when it failed.
 */
export async function killLeftBehind(started: readonly { readonly pid: number; readonly child: { kill(signal: NodeJS.Signals): boolean } }[], pids: readonly number[]): Promise<void> {
  for (const p of started) if (await pidAlive(p.pid)) p.child.kill("SIGKILL");
  for (const pid of pids) {
    try {
      process.kill(-pid, "SIGKILL");
    } catch {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone
      }
    }
  }
}

/** Environment of a pid as a map. */
export async function environOf(pid: number): Promise<Record<string, string>> {
  const text = await readFile(`/proc/${String(pid)}/environ`, "utf8");
  const out: Record<string, string> = {};
  for (const kv of text.split("\0")) {
    const i = kv.indexOf("=");
    if (i > 0) out[kv.slice(0, i)] = kv.slice(i + 1);
  }
  return out;
}
