/**
 * The README's Walkthrough is real output: this test reads its code blocks,
 * runs each `$ warden …` and `$ curl …` command against a real `warden up`
 * (coordinator, embedded agent, backend-sim backends — private ports and state
 * dir), and compares what comes back with what the README shows, after
 * blanking what differs from run to run (incarnations, ports, clock times,
 * "… ago", load durations). It also compares the audit trail `warden events`
 * printed meanwhile with the README's. A change of output, message or order
 * that the README does not follow fails here.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient } from "@warden/grpc";
import { AdminService } from "@warden/proto";
import { until } from "./support/coordinator-harness.js";
import { freePort } from "./support/free-port.js";
import { parseWalkthrough, normalizeOutput, shellWords, type WalkStep } from "./support/readme-walkthrough.js";

const root = resolve(import.meta.dirname, "..");
const cliBin = join(root, "services", "cli", "bin", "warden.js");
const readme = readFileSync(join(root, "README.md"), "utf8");

let up: ChildProcess | undefined;
let events: ChildProcess | undefined;
let eventsOut = "";
/** A backend this test paused to hold a call in flight (resumed after the next command, or at the end). */
let frozen: number | undefined;
let addr = "";
let httpAddr = "";
let stateDir = "";
const env = (): NodeJS.ProcessEnv => ({ ...process.env, NO_COLOR: "1", WARDEN_ADDR: addr });

interface Run {
  code: number | null;
  out: string;
}

/** Runs one `warden` command; `done` settles with its exit code and output (stdout, then stderr as it came). */
function warden(args: readonly string[]): { done: Promise<Run> } {
  const child = spawn(process.execPath, [cliBin, ...args], { cwd: root, env: env(), stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (b: Buffer) => (out += b.toString()));
  child.stderr.on("data", (b: Buffer) => (out += b.toString()));
  const done = new Promise<Run>((res) => {
    child.on("close", (code) => {
      res({ code, out });
    });
  });
  return { done };
}

/** The model's instances: calls in flight and backend addresses. */
async function instancesOf(model: string): Promise<{ inFlight: number; addresses: string[] }> {
  const a = createClient(AdminService, addr);
  try {
    const mine = (await a.listModels({})).instances.filter((i) => i.model === model);
    return { inFlight: mine.reduce((n, i) => n + i.inFlight, 0), addresses: mine.map((i) => i.address) };
  } finally {
    a.close();
  }
}

/** The backend-sim process this test's `warden up` started at `address` (matched by its `--addr`). */
function backendPid(address: string): number {
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const cmd = readFileSync(`/proc/${d}/cmdline`, "utf8").split("\0");
      const i = cmd.indexOf("--addr");
      if (i >= 0 && cmd[i + 1] === address && cmd.some((c) => c.includes("backend-sim"))) return Number(d);
    } catch {
      // exited meanwhile
    }
  }
  throw new Error(`no backend-sim process at ${address}`);
}

/** `curl -s URL -H … -d JSON` → the body, sent to this test's HTTP listener. */
async function curl(words: readonly string[]): Promise<string> {
  const url = words.find((w) => w.startsWith("http://"));
  const di = words.indexOf("-d");
  if (url === undefined || di < 0) throw new Error(`curl step not understood: ${words.join(" ")}`);
  const u = new URL(url);
  const r = await fetch(`http://${httpAddr}${u.pathname}`, { method: "POST", headers: { "content-type": "application/json" }, body: words[di + 1] ?? "" });
  return await r.text();
}

beforeAll(async () => {
  stateDir = await mkdtemp(join(tmpdir(), "warden-walkthrough-"));
  addr = `127.0.0.1:${String(await freePort())}`;
  httpAddr = `127.0.0.1:${String(await freePort())}`;
  let upOut = "";
  up = spawn(process.execPath, [cliBin, "up", "--listen", addr, "--state-dir", stateDir, "--http", httpAddr], { cwd: root, env: env(), stdio: ["ignore", "pipe", "pipe"] });
  up.stdout?.on("data", (b: Buffer) => (upOut += b.toString()));
  up.stderr?.on("data", (b: Buffer) => (upOut += b.toString()));
  await until("warden up banner", () => upOut.includes("Warden is running"), 90_000);
  events = spawn(process.execPath, [cliBin, "events"], { cwd: root, env: env(), stdio: ["ignore", "pipe", "pipe"] });
  events.stdout?.on("data", (b: Buffer) => (eventsOut += b.toString()));
  // WatchEvents is open once the stream's first line or the coordinator's log says so; a short
  // settle is not enough on a loaded machine, so wait for the CLI to report the open stream.
  events.stderr?.on("data", (b: Buffer) => (eventsOut += b.toString()));
  await until("warden events attached", async () => {
    const a = createClient(AdminService, addr);
    try {
      return (await a.getNode({ nodeId: "local" })).node !== undefined;
    } finally {
      a.close();
    }
  }, 60_000);
}, 150_000);

afterAll(async () => {
  if (frozen !== undefined) {
    try {
      process.kill(frozen, "SIGCONT");
    } catch {
      // Already gone (the run stopped it, or it failed before): nothing to resume.
    }
  }
  events?.kill("SIGKILL");
  if (up !== undefined && up.exitCode === null) {
    // SIGINT: `warden up` stops every backend it started (the Quick start's Ctrl-C).
    up.kill("SIGINT");
    await new Promise((r) => up?.once("close", r));
  }
  await rm(stateDir, { recursive: true, force: true });
}, 60_000);

describe("the README's Walkthrough", () => {
  const steps: WalkStep[] = parseWalkthrough(readme);

  it("has the commands and outputs this test walks", () => {
    expect(steps.filter((s) => s.kind === "command").length).toBeGreaterThanOrEqual(10);
    expect(steps.some((s) => s.kind === "events")).toBe(true);
  });

  it("prints what the README shows, command by command, and the audit trail it shows", async () => {
    let background: Promise<Run> | undefined;
    for (const step of steps) {
      if (step.kind === "events") {
        const want = normalizeOutput(step.expected);
        const got = await until(`the audit trail of ${String(want.length)} events`, () => {
          // foreign.detected: another `warden up` on this machine (a test file beside this one) has
          // backends in the demo's port range; the embedded agent reports them, as it should, but they
          // are not the walkthrough's.
          const lines = normalizeOutput(eventsOut.split("\n")).filter((l) => !l.includes(" foreign.detected "));
          return lines.length >= want.length ? lines : undefined;
        }, 60_000);
        expect(got, "`warden events` output").toEqual(want);
        continue;
      }
      const words = shellWords(step.command);
      const want = normalizeOutput(step.expected);
      if (words[0] === "curl") {
        expect(normalizeOutput([await curl(words)]), step.command).toEqual(want);
        continue;
      }
      if (words[0] === "wait") {
        // The shell's `wait`: the background call ends, and prints what the README shows.
        if (background === undefined) throw new Error("`wait` with no call in the background");
        const r = await background;
        background = undefined;
        expect(normalizeOutput(r.out.split("\n")), `the background call (exit ${String(r.code)})`).toEqual(want);
        continue;
      }
      if (words[0] !== "warden") throw new Error(`walkthrough step not understood: ${step.command}`);
      if (step.background) {
        const model = words[2] ?? "";
        // The README's `&` means "while this call is in flight": wait for the coordinator to count
        // it, then hold it there by pausing its backend until the next command has run — on a
        // loaded machine the next CLI process may take longer to start than the call takes. The
        // call can also end between the count and the pause (a slow poll): then it is run again.
        for (let attempt = 1; ; attempt++) {
          background = warden(words.slice(1)).done;
          const held = await until(`a call to ${model} in flight`, async () => {
            const s = await instancesOf(model);
            return s.inFlight > 0 ? s : undefined;
          }, 60_000);
          frozen = backendPid(held.addresses[0] ?? "");
          process.kill(frozen, "SIGSTOP");
          if ((await instancesOf(model)).inFlight > 0) break;
          process.kill(frozen, "SIGCONT");
          frozen = undefined;
          await background;
          if (attempt >= 5) throw new Error(`a call to ${model} ended before it could be held in flight, 5 times`);
        }
        continue;
      }
      if (step.afterSleep) {
        // `sleep N; warden …`: the README waits for a timer; this test waits for the outcome.
        await until(`${step.command} to print the README's output`, async () => {
          const r = await warden(words.slice(1)).done;
          return JSON.stringify(normalizeOutput(r.out.split("\n"))) === JSON.stringify(want) ? r : undefined;
        }, 90_000);
        continue;
      }
      const r = await warden(words.slice(1)).done;
      if (frozen !== undefined) {
    try {
      process.kill(frozen, "SIGCONT");
    } catch {
      // Already gone (the run stopped it, or it failed before): nothing to resume.
    }
  }
      frozen = undefined;
      expect(normalizeOutput(r.out.split("\n")), `$ ${step.command} (exit ${String(r.code)})`).toEqual(want);
    }
    await background;
  }, 300_000);
});
