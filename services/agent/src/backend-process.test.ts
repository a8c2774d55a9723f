import { describe, expect, it } from "vitest";
import { ManualClock, nullLogger } from "@warden/common";
import { BackendLogs } from "./backend-logs.js";
import { BackendProcess, type BackendPhase } from "./backend-process.js";
import type { ExitInfo, ProcessHandle } from "./process-handle.js";

/** A process that records signals and exits when told (or on SIGKILL). */
function fakeHandle(opts: { ignoreSigterm: boolean }) {
  const signals: string[] = [];
  let exit: (info: ExitInfo) => void = () => {};
  const exited = new Promise<ExitInfo>((r) => (exit = r));
  let gone = false;
  const die = (info: ExitInfo) => {
    if (gone) return;
    gone = true;
    exit(info);
  };
  const handle: ProcessHandle = {
    pid: 4242,
    adopted: false,
    exited,
    signalGroup(sig) {
      signals.push(sig);
      if (gone) return;
      if (sig === "SIGKILL") die({ exitCode: null, signal: "SIGKILL" });
      if (sig === "SIGTERM" && !opts.ignoreSigterm) die({ exitCode: 0, signal: "" });
    },
    detach() {},
  };
  return { handle, signals, die };
}

function make(opts: { ignoreSigterm: boolean; graceMs?: number }) {
  const clock = new ManualClock();
  const f = fakeHandle(opts);
  const transitions: string[] = [];
  const proc = new BackendProcess(
    { incarnation: "01J0000000000000000000000A", model: "m", backend: "sim", address: "127.0.0.1:1", port: 1, pidStartTime: "1", gpuDevice: "", startedAtMs: 0, loadDigest: "" },
    f.handle,
    new BackendLogs("/nonexistent-dir", "x", 10),
    { clock, graceMs: opts.graceMs ?? 10_000, logger: nullLogger, onTransition: (_p, from: BackendPhase, to: BackendPhase) => transitions.push(`${from.t}->${to.t}`) },
    { phase: "spawning", stopRequested: null },
  );
  return { clock, proc, transitions, ...f };
}

const flush = () => new Promise((r) => setImmediate(r));

describe("backend process state machine", () => {
  it("graceful stop: SIGTERM, and the process exits within the grace", async () => {
    const { proc, signals, transitions } = make({ ignoreSigterm: false });
    expect(proc.markLoading()).toBe(true);
    expect(proc.markReady(100)).toBe(true);
    const out = await proc.stop(false);
    expect(out).toEqual({ exitCode: 0, signal: "", escalated: false });
    expect(signals[0]).toBe("SIGTERM");
    expect(transitions).toEqual(["spawning->loading", "loading->ready", "ready->stopping", "stopping->exited"]);
    const st = proc.state();
    expect(st.t === "exited" && st.intentional).toBe(true);
  });

  it("escalates to SIGKILL exactly when the grace passes on the injected clock", async () => {
    const { proc, signals, clock } = make({ ignoreSigterm: true, graceMs: 10_000 });
    const p = proc.stop(false);
    clock.advance(9_999);
    await flush();
    expect(signals).toEqual(["SIGTERM"]);
    expect(proc.state().t).toBe("stopping");
    clock.advance(1);
    expect(await p).toEqual({ exitCode: null, signal: "SIGKILL", escalated: true });
    expect(signals.slice(0, 2)).toEqual(["SIGTERM", "SIGKILL"]);
  });

  it("single-flight: a second stop joins the first; a force stop upgrades a graceful one at once", async () => {
    const { proc, signals } = make({ ignoreSigterm: true });
    const a = proc.stop(false);
    const b = proc.stop(false);
    expect(signals).toEqual(["SIGTERM"]);
    const c = proc.stop(true);
    const [ra, rb, rc] = await Promise.all([a, b, c]);
    expect(ra.signal).toBe("SIGKILL");
    expect(rb).toEqual(ra);
    expect(rc).toEqual(ra);
    expect(signals.filter((s) => s === "SIGTERM")).toHaveLength(1);
  });

  it("a stop of a process already gone reports how it ended; an unasked exit is not intentional", async () => {
    const { proc, die } = make({ ignoreSigterm: false });
    die({ exitCode: 70, signal: "" });
    await proc.gone;
    const st = proc.state();
    expect(st.t === "exited" && !st.intentional && st.exit.exitCode === 70).toBe(true);
    expect(await proc.stop(false)).toEqual({ exitCode: 70, signal: "", escalated: false });
    expect(proc.markLoading()).toBe(false);
    expect(proc.noteStopRequested({ incarnation: "x", reason: "r", atMs: 1 })).toBe(false);
  });

  it("keeps the first stop request only", () => {
    const { proc } = make({ ignoreSigterm: false });
    expect(proc.noteStopRequested({ incarnation: "01J0000000000000000000000A", reason: "idle", atMs: 1 })).toBe(true);
    expect(proc.noteStopRequested({ incarnation: "01J0000000000000000000000A", reason: "lru", atMs: 2 })).toBe(false);
    expect(proc.stopRequested()?.reason).toBe("idle");
  });
});
