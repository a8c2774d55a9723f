import { chmod, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError, isWardenError } from "@warden/common";
import { createClient } from "@warden/grpc";
import { Backend, BackendState, StartFailureCode, StatusResponse_State, type WatchBackendsResponse } from "@warden/proto";
import { inProcessContext } from "../services/agent/src/index.js";
import {
  cases,
  collectStart,
  environOf,
  liveTaggedSims,
  newIncarnation,
  pidAlive,
  randomPortRange,
  startAgentHarness,
  startReady,
  tempDir,
  uniqueTag,
  waitFor,
  type AgentHarness,
} from "./support/agent-harness.js";

// Integration tests of the agent over real backend-sim processes and real
// loopback gRPC. Every backend carries this file's tag, so the leak check at the
// end counts only processes spawned here.
const fileTag = uniqueTag("agent-it");
const base = randomPortRange(70);
const decoder = new TextDecoder();

let h: AgentHarness;
let work: string;

function failedOf(events: Awaited<ReturnType<typeof collectStart>>) {
  const last = events[events.length - 1];
  if (last?.event.case !== "failed") throw new Error(`expected failed, got ${JSON.stringify(cases(events))}`);
  return last.event.value;
}

/** Collects WatchBackends events until `until` is satisfied. */
function watch(harness: AgentHarness) {
  const ctl = new AbortController();
  const events: WatchBackendsResponse[] = [];
  const done = (async () => {
    try {
      for await (const ev of harness.client.watchBackends({}, { signal: ctl.signal })) events.push(ev);
    } catch {
      // cancelled at the end
    }
  })();
  return {
    events,
    async stop() {
      ctl.abort();
      await done;
    },
  };
}

beforeAll(async () => {
  work = await tempDir("warden-agent-it");
  h = await startAgentHarness({ tag: `${fileTag}-main`, ports: { min: base.min, max: base.min + 29 }, config: { grace: "500ms", healthInterval: "200ms" } });
});

afterAll(async () => {
  await h.close({ stopBackends: true });
  await rm(work, { recursive: true, force: true });
  // No backend-sim spawned by this file may outlive it.
  expect(await waitFor("no tagged backend-sim left", async () => (await liveTaggedSims(fileTag)).length === 0, 20_000)).toBe(true);
});

describe("StartBackend", () => {
  it("streams spawned, loading, ready, and the backend answers Predict for its model only", async () => {
    const inc = newIncarnation();
    const events = await collectStart(h.client, { incarnation: inc, model: "llama-a" });
    expect(cases(events)).toEqual(["spawned", "loading", "ready"]);
    const spawned = events[0]?.event;
    const ready = events[2]?.event;
    if (spawned?.case !== "spawned" || ready?.case !== "ready") throw new Error("unexpected events");
    expect(ready.value.address).toBe(spawned.value.address);
    expect(ready.value.pid).toBe(spawned.value.pid);
    expect(Number(spawned.value.address.split(":")[1])).toBeGreaterThanOrEqual(base.min);
    const backend = createClient(Backend, ready.value.address);
    const reply = await backend.predict({ Prompt: "hi", ModelIdentity: "llama-a" });
    expect(decoder.decode(reply.message)).toMatch(/^llama-a: /);
    const wrong = await backend.predict({ Prompt: "hi", ModelIdentity: "other-model" }).catch((e: unknown) => e);
    // Upstream's answer to a wrong identity: NOT_FOUND with the mismatch sentinel (a stale route to a router).
    expect(isWardenError(wrong, Code.NotFound)).toBe(true);
    expect((wrong as Error).message).toContain('model identity mismatch: loaded "llama-a", requested "other-model"');
    backend.close();
    const inv = await h.client.listBackends({});
    const entry = inv.backends.find((b) => b.incarnation === inc);
    expect(entry?.state).toBe(BackendState.READY);
    expect(entry?.pid).toBe(ready.value.pid);
    expect(entry?.backend).toBe("sim");
    expect(entry?.stopRequested).toBeUndefined();
    const stop = await h.client.stopBackend({ address: ready.value.address, incarnation: inc, reason: "test" });
    expect(stop.outcome.case).toBe("stopped");
    expect(await pidAlive(ready.value.pid)).toBe(false);
  });

  it("Spawned carries the boot epoch and the last Heartbeat report stamped before the process entered the table", async () => {
    const before = h.agent.nextReportSequence();
    const events = await collectStart(h.client, { incarnation: newIncarnation(), model: "floor-m" });
    const spawned = events[0]?.event;
    if (spawned?.case !== "spawned") throw new Error("unexpected events");
    expect(spawned.value.bootEpoch).toBe(BigInt(h.agent.bootEpochMs));
    expect(spawned.value.heartbeatSequence).toBe(before);
    // A report stamped now lists the process: its number is above the floor.
    expect(h.agent.nextReportSequence()).toBe(before + 1n);
    const inv = await h.agent.inventory();
    expect(inv.backends.some((b) => b.address === spawned.value.address)).toBe(true);
  });

  it("a repeat with the same incarnation attaches to the start and spawns nothing new", async () => {
    const inc = newIncarnation();
    // two concurrent calls while it starts, one after it is ready
    const [a, b] = await Promise.all([
      collectStart(h.client, { incarnation: inc, model: "repeat-m", options: ["sim.load_delay_ms:300"] }),
      collectStart(h.client, { incarnation: inc, model: "repeat-m", options: ["sim.load_delay_ms:300"] }),
    ]);
    const c = await collectStart(h.client, { incarnation: inc, model: "repeat-m" });
    for (const evs of [a, b, c]) expect(cases(evs)).toEqual(["spawned", "loading", "ready"]);
    const pids = new Set([a, b, c].map((evs) => (evs[0]?.event.case === "spawned" ? evs[0].event.value.pid : -1)));
    expect(pids.size).toBe(1);
    expect(h.agent.processes().filter((p) => p.model === "repeat-m")).toHaveLength(1);
    const [pid] = [...pids];
    const inv = await h.client.listBackends({});
    const entry = inv.backends.find((e) => e.incarnation === inc);
    await h.client.stopBackend({ address: entry?.address ?? "", incarnation: inc });
    expect(await pidAlive(pid ?? 0)).toBe(false);
  });

  it("an exit before ready fails with the exit code and the last stderr line, leaving nothing behind", async () => {
    const inc = newIncarnation();
    const events = await collectStart(h.client, { incarnation: inc, model: "exits", options: ["sim.exit_code:3"] });
    const failed = failedOf(events);
    expect(failed.code).toBe(StartFailureCode.EXITED);
    expect(failed.exitCode).toBe(3);
    expect(failed.lastStderrLine).toBe("backend-sim exiting: exit_code knob in LoadModel (code 3)");
    const pid = events[0]?.event.case === "spawned" ? events[0].event.value.pid : 0;
    expect(await pidAlive(pid)).toBe(false);
    expect(h.agent.processes().some((p) => p.incarnation === inc)).toBe(false);
    expect(await readdirJson(h.stateDir)).not.toContain(`${inc}.json`);
  });

  it("LoadModel success=false fails with the backend's message and stops the process", async () => {
    const events = await collectStart(h.client, { incarnation: newIncarnation(), model: "bad-weights", options: ["sim.fail_load:weights file is corrupt"] });
    const failed = failedOf(events);
    expect(failed.code).toBe(StartFailureCode.LOAD_FAILED);
    expect(failed.message).toBe("weights file is corrupt");
    const pid = events[0]?.event.case === "spawned" ? events[0].event.value.pid : 0;
    expect(pid).toBeGreaterThan(0);
    expect(await pidAlive(pid)).toBe(false);
  });

  it("a load that outlives the call's deadline fails with DEADLINE_EXCEEDED before the caller's transport gives up", async () => {
    // 15 s: long enough that a loaded machine still reaches LoadModel (the phase
    // under test), and the agent's 1 s margin leaves its answer time to arrive.
    const events = await collectStart(h.client, { incarnation: newIncarnation(), model: "too-slow", options: ["sim.load_delay_ms:600000"] }, 15_000);
    expect(cases(events)).toEqual(["spawned", "loading", "failed"]);
    expect(failedOf(events).code).toBe(StartFailureCode.DEADLINE_EXCEEDED);
    const pid = events[0]?.event.case === "spawned" ? events[0].event.value.pid : 0;
    expect(await pidAlive(pid)).toBe(false);
  });

  it("works in process through the service handlers, without sockets", async () => {
    const inc = newIncarnation();
    const got: string[] = [];
    let address = "";
    for await (const ev of h.agent.service.startBackend({ $typeName: "warden.v1.StartBackendRequest", incarnation: inc, model: "embedded", backend: "sim", options: [], modelFile: "", contextSize: 0, gpuDevice: "", leaderEpoch: 0n, requestedBy: "", artifacts: [], loadDigest: "" }, inProcessContext({ deadlineAtMs: Date.now() + 30_000 }))) {
      got.push(ev.event?.case ?? "");
      if (ev.event?.case === "ready") address = ev.event.value.address ?? "";
    }
    expect(got).toEqual(["spawned", "loading", "ready"]);
    const res = await h.agent.service.stopBackend({ $typeName: "warden.v1.StopBackendRequest", address, incarnation: inc, force: false, reason: "embedded", leaderEpoch: 0n, requestedBy: "" }, inProcessContext());
    expect(res.outcome?.case).toBe("stopped");
  });
});

describe("StopBackend", () => {
  it("graceful stop sends SIGTERM, never Free, and reaps the process", async () => {
    const logA = join(work, "calls-a.log");
    const logB = join(work, "calls-b.log");
    const a = await startReady(h.client, "graceful", [`sim.call_log:${logA}`]);
    // control: a Free call does show up in a call log
    const b = await startReady(h.client, "graceful-control", [`sim.call_log:${logB}`]);
    const backendB = createClient(Backend, b.address);
    await backendB.free({});
    backendB.close();
    expect((await readFile(logB, "utf8")).split("\n")).toContain("Free");
    const res = await h.client.stopBackend({ address: a.address, incarnation: a.incarnation, reason: "idle" });
    expect(res.outcome.case).toBe("stopped");
    if (res.outcome.case === "stopped") {
      expect(res.outcome.value.escalated).toBe(false);
      expect(res.outcome.value.exitCode).toBe(0);
    }
    const calls = (await readFile(logA, "utf8")).split("\n");
    expect(calls).toContain("SIGTERM");
    expect(calls).not.toContain("Free");
    expect(await pidAlive(a.pid)).toBe(false);
    await h.client.stopBackend({ address: b.address, incarnation: b.incarnation, force: true });
  });

  it("force stop during a long Predict kills the process at once", async () => {
    const r = await startReady(h.client, "long-predict", ["sim.predict_delay_ms:600000"]);
    const backend = createClient(Backend, r.address);
    const predict = backend.predict({ Prompt: "long", ModelIdentity: "long-predict" }).then(
      () => "answered",
      (e: unknown) => e,
    );
    await waitFor("predict in flight", async () => (await backend.status({})).state === StatusResponse_State.BUSY);
    const res = await h.client.stopBackend({ address: r.address, incarnation: r.incarnation, force: true, reason: "busy" });
    expect(res.outcome.case).toBe("stopped");
    if (res.outcome.case === "stopped") expect(res.outcome.value.signal).toBe("SIGKILL");
    expect(await predict).toBeInstanceOf(WardenError);
    expect(await pidAlive(r.pid)).toBe(false);
    backend.close();
  });

  it("a backend that ignores SIGTERM is SIGKILLed after the grace; stopRequested is reported while it stops", async () => {
    const r = await startReady(h.client, "stubborn", ["sim.ignore_sigterm:true"]);
    const stop = h.client.stopBackend({ address: r.address, incarnation: r.incarnation, reason: "lru" });
    const during = await waitFor("stopping with stopRequested", async () => {
      const e = (await h.client.listBackends({})).backends.find((b) => b.incarnation === r.incarnation);
      return e?.state === BackendState.STOPPING && e.stopRequested !== undefined ? e : undefined;
    });
    expect(during.stopRequested?.reason).toBe("lru");
    expect(during.stopRequested?.incarnation).toBe(r.incarnation);
    const res = await stop;
    expect(res.outcome.case).toBe("stopped");
    if (res.outcome.case === "stopped") {
      expect(res.outcome.value.escalated).toBe(true);
      expect(res.outcome.value.signal).toBe("SIGKILL");
    }
    expect(await pidAlive(r.pid)).toBe(false);
  });

  it("a caller deadline shorter than the grace still ends with the process reaped", async () => {
    const w = watch(h);
    const r = await startReady(h.client, "deadline-stop", ["sim.ignore_sigterm:true"]);
    // On a loaded machine a 100 ms deadline can pass before the agent has begun
    // the stop; then it must have done nothing (still ready, same pid) and the
    // caller tries again. Once begun, the caller giving up must not abort it.
    for (let attempt = 0; ; attempt++) {
      const err = await h.client.stopBackend({ address: r.address, incarnation: r.incarnation, reason: "admin" }, { timeoutMs: 100 }).catch((e: unknown) => e);
      expect(isWardenError(err, Code.DeadlineExceeded)).toBe(true);
      const entry = (await h.client.listBackends({})).backends.find((b) => b.incarnation === r.incarnation);
      if (entry === undefined || entry.state !== BackendState.READY) break;
      expect(await pidAlive(r.pid)).toBe(true);
      expect(attempt).toBeLessThan(50);
    }
    await waitFor("process reaped after the caller gave up", async () => !(await pidAlive(r.pid)));
    const exited = await waitFor("exited event", () => w.events.find((e) => e.incarnation === r.incarnation && e.event.case === "exited"));
    if (exited.event.case === "exited") {
      expect(exited.event.value.intentional).toBe(true);
      expect(exited.event.value.signal).toBe("SIGKILL");
    }
    // a retried stop now finds it gone and says so
    const again = await h.client.stopBackend({ address: r.address, incarnation: r.incarnation });
    expect(["stopped", "alreadyGone"]).toContain(again.outcome.case);
    await w.stop();
  });

  it("a stop of a loading model waits on the model lock and fails with the lock message at its deadline", async () => {
    const inc = newIncarnation();
    const events: string[] = [];
    let address = "";
    const start = (async () => {
      for await (const ev of h.client.startBackend({ incarnation: inc, model: "slow-load", backend: "sim", options: ["sim.load_delay_ms:2500"] }, { timeoutMs: 30_000 })) {
        events.push(ev.event.case ?? "");
        if (ev.event.case === "spawned") address = ev.event.value.address;
      }
    })();
    await waitFor("loading", () => events.includes("loading"));
    const err = await h.client.stopBackend({ address, incarnation: inc, reason: "admin" }, { timeoutMs: 600 }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.DeadlineExceeded)).toBe(true);
    expect((err as WardenError).rawMessage).toBe('waiting to shut down model "slow-load": context deadline exceeded');
    await start;
    // the stop never cancels the load: it becomes ready, and carries the stop request
    expect(events).toEqual(["spawned", "loading", "ready"]);
    const entry = (await h.client.listBackends({})).backends.find((b) => b.incarnation === inc);
    expect(entry?.state).toBe(BackendState.READY);
    expect(entry?.stopRequested?.reason).toBe("admin");
    const res = await h.client.stopBackend({ address, incarnation: inc });
    expect(res.outcome.case).toBe("stopped");
  });

  it("a crash is detected with its exit code and last stderr line", async () => {
    const w = watch(h);
    const r = await startReady(h.client, "crashy", ["sim.crash_after:1"]);
    const backend = createClient(Backend, r.address);
    const err = await backend.predict({ Prompt: "x", ModelIdentity: "crashy" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WardenError);
    backend.close();
    const exited = await waitFor("exited event", () => w.events.find((e) => e.incarnation === r.incarnation && e.event.case === "exited"));
    if (exited.event.case !== "exited") throw new Error("unreachable");
    expect(exited.event.value.exitCode).toBe(70);
    expect(exited.event.value.intentional).toBe(false);
    expect(exited.event.value.lastStderrLine).toBe("backend-sim exiting: crash_after 1 requests (code 70)");
    // (a health event may slip in between the crash and its detection; the lifecycle order is what matters)
    expect(w.events.filter((e) => e.incarnation === r.incarnation && e.event.case !== "health").map((e) => e.event.case)).toEqual(["started", "ready", "exited"]);
    // a stop of a process that is already dead, while the agent still lists it, is "stopped" with how it ended
    const dead = await h.client.stopBackend({ address: r.address, incarnation: r.incarnation, reason: "cleanup" });
    expect(dead.outcome).toMatchObject({ case: "stopped", value: { exitCode: 70, escalated: false } });
    // the inventory shows it exited once, then forgets it
    const first = (await h.client.listBackends({})).backends.find((b) => b.incarnation === r.incarnation);
    expect(first?.state).toBe(BackendState.EXITED);
    const second = (await h.client.listBackends({})).backends.find((b) => b.incarnation === r.incarnation);
    expect(second).toBeUndefined();
    // once forgotten, the incarnation is simply gone
    const res = await h.client.stopBackend({ address: r.address, incarnation: r.incarnation });
    expect(res.outcome.case).toBe("alreadyGone");
    await w.stop();
  });

  it("reports health changes of a ready backend on WatchBackends", async () => {
    const w = watch(h);
    const r = await startReady(h.client, "frozen");
    // a stopped (SIGSTOP) process keeps its socket but answers nothing: busy or stuck
    process.kill(r.pid, "SIGSTOP");
    const down = await waitFor("unhealthy event", () => w.events.find((e) => e.incarnation === r.incarnation && e.event.case === "health" && !e.event.value.healthy));
    if (down.event.case === "health") expect(down.event.value.detail).toMatch(/deadline/i);
    process.kill(r.pid, "SIGCONT");
    await waitFor("healthy again", () => w.events.find((e) => e.incarnation === r.incarnation && e.event.case === "health" && e.event.value.healthy));
    await w.stop();
    expect((await h.client.stopBackend({ address: r.address, incarnation: r.incarnation })).outcome.case).toBe("stopped");
  });

  it("a stale incarnation on a recycled port is alreadyGone{replacedBy} and the replacement is untouched", async () => {
    const one = base.min + 30;
    const h1 = await startAgentHarness({ tag: `${fileTag}-recycle`, ports: { min: one, max: one }, config: { grace: "500ms" } });
    try {
      const a = await startReady(h1.client, "recycled");
      expect((await h1.client.stopBackend({ address: a.address, incarnation: a.incarnation })).outcome.case).toBe("stopped");
      const b = await startReady(h1.client, "recycled");
      expect(b.address).toBe(a.address);
      const res = await h1.client.stopBackend({ address: a.address, incarnation: a.incarnation, force: true });
      expect(res.outcome).toMatchObject({ case: "alreadyGone", value: { replacedBy: b.incarnation } });
      expect(await pidAlive(b.pid)).toBe(true);
      const backend = createClient(Backend, b.address);
      expect(decoder.decode((await backend.predict({ ModelIdentity: "recycled" })).message)).toMatch(/^recycled:/);
      backend.close();
      // an incarnation the agent never saw is gone too, with the current holder named
      const unknown = await h1.client.stopBackend({ address: a.address, incarnation: newIncarnation() });
      expect(unknown.outcome).toMatchObject({ case: "alreadyGone", value: { replacedBy: b.incarnation } });
    } finally {
      await h1.close();
    }
  });
});

describe("bad input", () => {
  const bad = async (p: Promise<unknown>): Promise<WardenError> => {
    const err = await p.catch((e: unknown) => e);
    if (!(err instanceof WardenError)) throw new Error(`expected an error, got ${String(err)}`);
    return err;
  };
  const startErr = (req: { incarnation: string; model: string; backend: string; gpuDevice?: string; options?: string[] }) => bad(collectStart(h.client, req));

  it("rejects a backend not in the catalog with INVALID_ARGUMENT", async () => {
    const err = await startErr({ incarnation: newIncarnation(), model: "m", backend: "/bin/sh" });
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.rawMessage).toMatch(/^backend: /);
    expect((await startErr({ incarnation: newIncarnation(), model: "m", backend: "not-there" })).code).toBe(Code.InvalidArgument);
  });

  it("rejects malformed incarnations, model ids, addresses and options with INVALID_ARGUMENT", async () => {
    for (const incarnation of ["", "not-a-ulid", "01ARZ3NDEKTSV4RRFFQ69G5FA", "01arz3ndektsv4rrffq69g5fav", "81ARZ3NDEKTSV4RRFFQ69G5FAV"]) {
      const err = await startErr({ incarnation, model: "m", backend: "sim" });
      expect(err.code).toBe(Code.InvalidArgument);
      expect(err.rawMessage).toMatch(/^incarnation: /);
    }
    for (const model of ["", "-rf", "--config=/etc/passwd", "a b", "a;rm", "x".repeat(129), "m\u0000", "\u202Eevil"]) {
      const err = await startErr({ incarnation: newIncarnation(), model, backend: "sim" });
      expect(err.code).toBe(Code.InvalidArgument);
      expect(err.rawMessage).toMatch(/^model: /);
    }
    expect((await startErr({ incarnation: newIncarnation(), model: "m", backend: "sim", options: ["a\nb"] })).code).toBe(Code.InvalidArgument);
    expect((await startErr({ incarnation: newIncarnation(), model: "m", backend: "sim", gpuDevice: "7" })).code).toBe(Code.InvalidArgument);
    expect((await bad(h.client.stopBackend({ address: "127.0.0.1:1", incarnation: "nope" }))).code).toBe(Code.InvalidArgument);
    expect((await bad(h.client.stopBackend({ address: "no-port", incarnation: newIncarnation() }))).code).toBe(Code.InvalidArgument);
    // nothing was spawned for any of them
    expect(h.agent.processes().filter((p) => p.model === "m")).toHaveLength(0);
  });

  it("an unknown incarnation stops as alreadyGone with no replacement", async () => {
    const res = await h.client.stopBackend({ address: `127.0.0.1:${String(base.min + 29)}`, incarnation: newIncarnation() });
    expect(res.outcome).toMatchObject({ case: "alreadyGone", value: { replacedBy: "" } });
  });
});

describe("memory and node status", () => {
  it("without nvidia-smi reports RAM from /proc and per-process RSS", async () => {
    const status = await h.client.getNodeStatus({});
    expect(status.nodeId).toBe("test-node");
    expect(status.resources?.gpus).toEqual([]);
    expect(status.resources?.ramTotalBytes).toBeGreaterThan(0n);
    expect(status.resources?.ramUsedBytes).toBeGreaterThan(0n);
    const r = await startReady(h.client, "rss", ["sim.alloc_mib:64"]);
    const entry = (await h.client.listBackends({})).backends.find((b) => b.incarnation === r.incarnation);
    expect(entry?.memoryBytes).toBeGreaterThanOrEqual(64n * 1024n * 1024n);
    await h.client.stopBackend({ address: r.address, incarnation: r.incarnation, force: true });
  });

  it("parses nvidia-smi through a fake script, assigns GPUs and passes only allowed environment", async () => {
    const dir = await tempDir("fake-nvidia");
    const script = join(dir, "nvidia-smi");
    await writeFile(
      script,
      `#!/bin/sh
dir=$(dirname "$0")
[ "$2" = "--format=csv,noheader,nounits" ] || exit 9
case "$1" in
  --query-gpu=index,name,memory.total,memory.used) printf '0, NVIDIA A100-SXM4-80GB, 81920, 1024\\n1, NVIDIA A100-SXM4-80GB, 81920, 2048\\n' ;;
  --query-compute-apps=pid,used_memory) cat "$dir/apps.csv" 2>/dev/null ;;
  *) exit 9 ;;
esac
`,
    );
    await chmod(script, 0o755);
    const h2 = await startAgentHarness({
      tag: `${fileTag}-gpu`,
      ports: { min: base.min + 31, max: base.min + 40 },
      config: { nvidiaSmi: script, gpus: ["0", "1"] },
      deps: { env: { PATH: process.env.PATH, LD_PRELOAD: "/tmp/evil.so", SECRET_TOKEN: "s3cret" } },
    });
    try {
      const status = await h2.client.getNodeStatus({});
      expect(status.resources?.gpus.map((g) => ({ index: g.index, name: g.name, total: g.totalBytes, used: g.usedBytes }))).toEqual([
        { index: 0, name: "NVIDIA A100-SXM4-80GB", total: 81920n * 1048576n, used: 1024n * 1048576n },
        { index: 1, name: "NVIDIA A100-SXM4-80GB", total: 81920n * 1048576n, used: 2048n * 1048576n },
      ]);
      const a = await collectStart(h2.client, { incarnation: newIncarnation(), model: "gpu-a" });
      const b = await collectStart(h2.client, { incarnation: newIncarnation(), model: "gpu-b" });
      const sa = a[0]?.event;
      const sb = b[0]?.event;
      if (sa?.case !== "spawned" || sb?.case !== "spawned") throw new Error("not spawned");
      expect(new Set([sa.value.gpuDevice, sb.value.gpuDevice])).toEqual(new Set(["0", "1"]));
      const env = await environOf(sa.value.pid);
      expect(env.CUDA_VISIBLE_DEVICES).toBe(sa.value.gpuDevice);
      expect(env.PATH).toBe(process.env.PATH);
      expect(env.LD_PRELOAD).toBeUndefined();
      expect(env.SECRET_TOKEN).toBeUndefined();
      await writeFile(join(dir, "apps.csv"), `${String(sa.value.pid)}, 4096\n`);
      const inv = await h2.client.listBackends({});
      const ea = inv.backends.find((e) => e.pid === sa.value.pid);
      expect(ea?.memoryBytes).toBe(4096n * 1048576n);
      expect(ea?.gpuDevice).toBe(sa.value.gpuDevice);
      // a backend nvidia-smi does not list falls back to its RSS
      const eb = inv.backends.find((e) => e.pid === sb.value.pid);
      expect(eb?.memoryBytes).toBeGreaterThan(0n);
      expect(eb?.memoryBytes).not.toBe(4096n * 1048576n);
      const record = JSON.parse(await readFile(join(h2.stateDir, `${ea?.incarnation ?? ""}.json`), "utf8")) as { gpuDevice: string; pidStartTime: string };
      expect(record.gpuDevice).toBe(sa.value.gpuDevice);
      expect(record.pidStartTime).toMatch(/^\d+$/);
    } finally {
      await h2.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("readiness timeout and spawn failure fail with their codes", async () => {
    const h3 = await startAgentHarness({
      tag: `${fileTag}-fail`,
      ports: { min: base.min + 41, max: base.min + 50 },
      config: { readiness: { attempts: 8, interval: "250ms", initialInterval: "20ms" } },
      catalog: {
        missing: { command: "/nonexistent/warden-backend", args: [] },
      },
    });
    try {
      // catalog entries reuse the tagged sim entry with knobs in their fixed env
      const slowCfg = { ...h3.config.catalog.sim, env: { ...h3.config.catalog.sim?.env, SIM_START_DELAY_MS: "30000" } };
      const exitCfg = { ...h3.config.catalog.sim, env: { ...h3.config.catalog.sim?.env, SIM_EXIT_CODE: "4" } };
      (h3.config.catalog as Record<string, unknown>).slow = slowCfg;
      (h3.config.catalog as Record<string, unknown>).early = exitCfg;
      const slow = await collectStart(h3.client, { incarnation: newIncarnation(), model: "slow", backend: "slow" });
      expect(failedOf(slow).code).toBe(StartFailureCode.READINESS_TIMEOUT);
      const slowPid = slow[0]?.event.case === "spawned" ? slow[0].event.value.pid : 0;
      expect(await pidAlive(slowPid)).toBe(false);
      const missing = await collectStart(h3.client, { incarnation: newIncarnation(), model: "m", backend: "missing" });
      expect(cases(missing)).toEqual(["failed"]);
      expect(failedOf(missing).code).toBe(StartFailureCode.SPAWN_FAILED);
    } finally {
      await h3.close();
    }
  });

  it("an exit before binding fails as EXITED with its code and last stderr line, however long the process takes to start", async () => {
    // A readiness budget far beyond any start: on a loaded machine the process may
    // take seconds to get as far as exiting, and the exit (not the budget) must decide.
    const h5 = await startAgentHarness({ tag: `${fileTag}-early`, ports: { min: base.min + 60, max: base.min + 65 }, config: { readiness: { attempts: 240, interval: "250ms", initialInterval: "20ms" } } });
    try {
      const exitCfg = { ...h5.config.catalog.sim, env: { ...h5.config.catalog.sim?.env, SIM_EXIT_CODE: "4" } };
      (h5.config.catalog as Record<string, unknown>).early = exitCfg;
      const early = await collectStart(h5.client, { incarnation: newIncarnation(), model: "early", backend: "early" }, 90_000);
      const f = failedOf(early);
      expect(f.code).toBe(StartFailureCode.EXITED);
      expect(f.exitCode).toBe(4);
      expect(f.lastStderrLine).toBe("backend-sim exiting: exit_code knob before ready (code 4)");
    } finally {
      await h5.close();
    }
  });
});

describe("shutdown with --stop-backends-on-exit", () => {
  it("calls Free (UNIMPLEMENTED or hanging is fine) and then stops every backend", async () => {
    const h4 = await startAgentHarness({ tag: `${fileTag}-exit`, ports: { min: base.min + 51, max: base.min + 59 }, config: { freeTimeout: "300ms", grace: "500ms" } });
    const log1 = join(work, "exit-1.log");
    const log2 = join(work, "exit-2.log");
    const a = await startReady(h4.client, "free-unimpl", ["sim.free:unimplemented", `sim.call_log:${log1}`]);
    const b = await startReady(h4.client, "free-hang", ["sim.free:hang", `sim.call_log:${log2}`]);
    await h4.close({ stopBackends: true });
    expect(await pidAlive(a.pid)).toBe(false);
    expect(await pidAlive(b.pid)).toBe(false);
    for (const log of [log1, log2]) {
      const calls = (await readFile(log, "utf8")).split("\n");
      expect(calls.indexOf("Free")).toBeGreaterThan(-1);
      expect(calls.indexOf("SIGTERM")).toBeGreaterThan(calls.indexOf("Free"));
    }
  });
});

async function readdirJson(dir: string): Promise<string[]> {
  return (await readdir(dir)).filter((f) => f.endsWith(".json"));
}
