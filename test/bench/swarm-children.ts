/**
 * The swarm benchmark's child processes (load generators, the floor server):
 * forked with tsx and an IPC channel, told to stop by message, killed if
 * they do not.
 */
import { fork, type ChildProcess } from "node:child_process";
import { join } from "node:path";

/** Forks a bench child with tsx (IPC on). */
export function forkChild(file: string, args: readonly string[]): ChildProcess {
  return fork(join(import.meta.dirname, file), [...args], { execArgv: ["--import", "tsx"], stdio: ["ignore", "inherit", "inherit", "ipc"] });
}

export function nextMessage<T>(child: ChildProcess, t: string, timeoutMs: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`no "${t}" from child within ${String(timeoutMs)} ms`));
    }, timeoutMs);
    const onMessage = (m: { t: string }): void => {
      if (m.t !== t) return;
      cleanup();
      resolve(m as T);
    };
    const onExit = (code: number | null): void => {
      cleanup();
      reject(new Error(`child exited with ${String(code)} before "${t}"`));
    };
    const cleanup = (): void => {
      clearTimeout(timer);
      child.off("message", onMessage);
      child.off("exit", onExit);
    };
    child.on("message", onMessage);
    child.once("exit", onExit);
  });
}

export async function stopChild(child: ChildProcess, graceMs = 15_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.send({ t: "stop" });
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await exited;
  clearTimeout(timer);
}

/** The load generators: each forked with its own range of nodes. */
export interface Generators {
  readonly children: readonly ChildProcess[];
}

export async function stopGenerators(g: Generators): Promise<void> {
  await Promise.all(g.children.map((c) => stopChild(c)));
}
