/**
 * A private nats-server for one test file: random loopback port, JetStream on,
 * store in a temp dir. The binary is $NATS_SERVER_BIN, else `nats-server` on
 * PATH, else /usr/sbin/nats-server (where Debian's package puts it, off a
 * non-root PATH). The process is SIGKILLed on process exit so it never outlives
 * the test run.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { connect as tcpConnect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./free-port.js";

export interface NatsServerHandle {
  readonly url: string;
  readonly port: number;
  readonly storeDir: string;
  /** True while a server process is running. */
  running(): boolean;
  /** SIGTERM and wait for exit (the store dir stays, for `start`). */
  stop(): Promise<void>;
  /** SIGKILL and wait for exit: a crash of the server (the store dir stays). */
  kill(): Promise<void>;
  /** Start again on the same port and store dir; waits for the port. */
  start(): Promise<void>;
  /** Stop and delete the store dir. */
  dispose(): Promise<void>;
}

export interface StartNatsServerOptions {
  /** Extra arguments, e.g. `["-c", configFile]`. */
  readonly args?: readonly string[];
  /** Give up waiting for the port after this long. @default 15000 */
  readonly startTimeoutMs?: number;
}

const live = new Set<ChildProcess>();
process.on("exit", () => {
  for (const p of live) p.kill("SIGKILL");
});

/** Path of the nats-server binary, or throws with install advice. */
export function natsServerBinary(): string {
  const fromEnv = process.env["NATS_SERVER_BIN"];
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv;
  const which = spawnSync("sh", ["-c", "command -v nats-server"], { encoding: "utf8" });
  const onPath = which.stdout.trim();
  if (which.status === 0 && onPath !== "") return onPath;
  if (existsSync("/usr/sbin/nats-server")) return "/usr/sbin/nats-server";
  throw new Error("nats-server not found: apt-get install -y nats-server, or set NATS_SERVER_BIN");
}

function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = tcpConnect({ host: "127.0.0.1", port });
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => {
      s.destroy();
      resolve(false);
    });
  });
}

/** Spawns a server and waits until its port accepts connections. */
export async function startNatsServer(options: StartNatsServerOptions = {}): Promise<NatsServerHandle> {
  const bin = natsServerBinary();
  const port = await freePort();
  const storeDir = await mkdtemp(join(tmpdir(), "warden-nats-"));
  const timeoutMs = options.startTimeoutMs ?? 15_000;
  let proc: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  let stderr = "";
  // A function, so the compiler does not narrow `proc` across awaits.
  const isRunning = (): boolean => proc !== undefined;

  const start = async (): Promise<void> => {
    if (proc !== undefined) throw new Error("nats-server already running");
    const p = spawn(bin, ["-a", "127.0.0.1", "-p", String(port), "-js", "-sd", storeDir, ...(options.args ?? [])], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    proc = p;
    live.add(p);
    p.stderr.on("data", (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-4000);
    });
    exited = new Promise((resolve) => {
      p.once("exit", () => {
        live.delete(p);
        if (proc === p) proc = undefined;
        resolve();
      });
    });
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (!isRunning()) throw new Error(`nats-server exited at start: ${stderr}`);
      if (await portOpen(port)) return;
      // The port may still be held briefly by the previous process on a restart.
      if (Date.now() > deadline) throw new Error(`nats-server did not open port ${port} within ${timeoutMs} ms: ${stderr}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  };

  const stop = async (): Promise<void> => {
    const p = proc;
    if (p === undefined) return;
    p.kill("SIGTERM");
    const killer = setTimeout(() => p.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(killer);
  };

  const kill = async (): Promise<void> => {
    const p = proc;
    if (p === undefined) return;
    p.kill("SIGKILL");
    await exited;
  };

  await start();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    storeDir,
    running: isRunning,
    stop,
    kill,
    start,
    async dispose() {
      await stop();
      await rm(storeDir, { recursive: true, force: true });
    },
  };
}
