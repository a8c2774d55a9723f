/**
 * Warden's data plane against the thinnest possible forwarder, in the same
 * run: 64 concurrent callers send Predict (1) straight to a backend-sim, (2)
 * through a bare `node:http2` process that passes gRPC frames unparsed
 * (bare-h2-forwarder.ts: the floor for any proxy), (3) through the
 * coordinator's data-plane listener and (4) its main port. For each: calls/s,
 * and the forwarding process's whole CPU per call from /proc (utime + stime),
 * which is stable on a shared machine where calls/s is not. Interleaved
 * rounds, medians. Goal: ≤ 1.3× the forwarder's CPU per call and ≥ 0.9× its
 * throughput. A second floor, Warden's lean server and client forwarding with
 * nothing else (lean-h2-forwarder.ts), splits the data plane's cost into the
 * transport's and the coordinator's own.
 *
 * WARDEN_BENCH_COMPARE=<another checkout> (built, with node_modules) also runs
 * that checkout's coordinator in the same rounds (a before/after of a change
 * under the same load) and reports this checkout's data plane against it.
 * The two places are not alike: with the same code on both sides (the
 * variable naming this checkout) the compared one measured 8–19 % more CPU
 * per call, also with the two taking turns in each round. Run a before/after
 * both ways round (from each checkout, naming the other).
 */
import { spawn, type ChildProcessByStdio } from "node:child_process";
import { readFile } from "node:fs/promises";
import { loadavg } from "node:os";
import type { Readable } from "node:stream";
import { join, resolve } from "node:path";
import { createClient } from "@warden/grpc";
import { AdminService, Backend, InferenceService } from "@warden/proto";
import { median, type BenchResult } from "./bench-result.js";
import { cpuProfArgs, startBenchCoordinator } from "./bench-coordinator.js";
import { freePort } from "../support/free-port.js";

const clockTicksPerSec = 100; // Linux USER_HZ

async function cpuMs(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${String(pid)}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return ((Number(f[11]) + Number(f[12])) * 1000) / clockTicksPerSec;
}

/** Calls completed and the process's CPU ms over `durationMs` of `concurrency` callers. */
async function round(durationMs: number, concurrency: number, call: () => Promise<unknown>, pid: number | undefined): Promise<{ callsPerSec: number; cpuUsPerCall: number }> {
  const cpu0 = pid === undefined ? 0 : await cpuMs(pid);
  const start = performance.now();
  const end = start + durationMs;
  let n = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        await call();
        n++;
      }
    }),
  );
  const seconds = (performance.now() - start) / 1000;
  const cpu = pid === undefined ? 0 : (await cpuMs(pid)) - cpu0;
  return { callsPerSec: n / seconds, cpuUsPerCall: n === 0 ? 0 : (cpu * 1000) / n };
}

export async function run(): Promise<BenchResult[]> {
  const coordinator = await startBenchCoordinator("routing-floor", 23600);
  const compareRoot = process.env.WARDEN_BENCH_COMPARE;
  const other = compareRoot === undefined ? undefined : await startBenchCoordinator("routing-floor-other", 23650, undefined, { root: compareRoot });
  const root = resolve(import.meta.dirname, "..", "..");
  const fwdPort = await freePort();
  try {
    const inference = createClient(InferenceService, coordinator.dataPlane);
    const inferenceMain = createClient(InferenceService, coordinator.address);
    await inference.predict({ model: "m", options: { Prompt: "warm" } });
    const admin = createClient(AdminService, coordinator.address);
    const backendAddress = (await admin.listModels({})).instances[0]?.address ?? "";
    admin.close();
    const startForwarder = async (file: string, port: number): Promise<ChildProcessByStdio<null, Readable, null>> => {
      const p = spawn(process.execPath, [...cpuProfArgs(), "--import", "tsx", join(root, file), String(port), backendAddress], { cwd: root, stdio: ["ignore", "pipe", "inherit"] });
      await new Promise<void>((ok, fail) => {
        p.stdout.on("data", (b: Buffer) => {
          if (b.toString().includes("listening")) ok();
        });
        p.once("exit", (code) => {
          fail(new Error(`${file} exited ${String(code)}`));
        });
      });
      return p;
    };
    const fwd = await startForwarder("test/bench/bare-h2-forwarder.ts", fwdPort);
    const leanPort = await freePort();
    const lean = await startForwarder("test/bench/lean-h2-forwarder.ts", leanPort);
    const direct = createClient(Backend, backendAddress);
    const viaFwd = createClient(Backend, `127.0.0.1:${String(fwdPort)}`);
    const viaLean = createClient(Backend, `127.0.0.1:${String(leanPort)}`);
    const straight = (): Promise<unknown> => direct.predict({ Prompt: "hi", ModelIdentity: "m" });
    // The forwarder passes what it gets: the caller names the model as Warden would append it.
    const forwarded = (): Promise<unknown> => viaFwd.predict({ Prompt: "hi", ModelIdentity: "m" });
    const leanForwarded = (): Promise<unknown> => viaLean.predict({ Prompt: "hi", ModelIdentity: "m" });
    const dataPlane = (): Promise<unknown> => inference.predict({ model: "m", options: { Prompt: "hi" } });
    const mainPort = (): Promise<unknown> => inferenceMain.predict({ model: "m", options: { Prompt: "hi" } });
    const inferenceOther = other === undefined ? undefined : createClient(InferenceService, other.dataPlane);
    const otherPlane = (): Promise<unknown> => (inferenceOther ?? inference).predict({ model: "m", options: { Prompt: "hi" } });
    for (const f of [straight, forwarded, leanForwarded, dataPlane, mainPort, ...(other === undefined ? [] : [otherPlane])]) await round(500, 16, f, undefined);
    // The coordinator's CPU with no calls (its embedded agent's heartbeat and inventory, the ticks):
    // part of every whole-process figure below, and a larger part per call the fewer calls a loaded machine lets through.
    const idle0 = await cpuMs(coordinator.pid);
    const idleStart = performance.now();
    await new Promise((r) => setTimeout(r, 3000));
    const idleMsPerSec = ((await cpuMs(coordinator.pid)) - idle0) / ((performance.now() - idleStart) / 1000);
    const rounds = Number(process.env.WARDEN_BENCH_ROUNDS ?? "5");
    const s: number[] = [];
    const fr: { callsPerSec: number; cpuUsPerCall: number }[] = [];
    const lf: { callsPerSec: number; cpuUsPerCall: number }[] = [];
    const dp: { callsPerSec: number; cpuUsPerCall: number }[] = [];
    const mp: { callsPerSec: number; cpuUsPerCall: number }[] = [];
    const op: { callsPerSec: number; cpuUsPerCall: number }[] = [];
    for (let i = 0; i < rounds; i++) {
      s.push((await round(1500, 64, straight, undefined)).callsPerSec);
      fr.push(await round(1500, 64, forwarded, fwd.pid));
      lf.push(await round(1500, 64, leanForwarded, lean.pid));
      dp.push(await round(1500, 64, dataPlane, coordinator.pid));
      mp.push(await round(1500, 64, mainPort, coordinator.pid));
      if (other !== undefined) op.push(await round(1500, 64, otherPlane, other.pid));
    }
    direct.close();
    viaFwd.close();
    viaLean.close();
    lean.kill("SIGTERM");
    inference.close();
    inferenceMain.close();
    inferenceOther?.close();
    fwd.kill("SIGTERM");
    const m = (xs: readonly { callsPerSec: number; cpuUsPerCall: number }[], k: "callsPerSec" | "cpuUsPerCall"): number => median(xs.map((x) => x[k]));
    const spread = (xs: readonly number[]): string => `${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)}`;
    process.stderr.write(
      `routing-floor: straight ${spread(s)} calls/s; forwarder ${spread(fr.map((x) => x.callsPerSec))} calls/s, ${spread(fr.map((x) => x.cpuUsPerCall))} µs CPU/call; lean forwarder ${spread(lf.map((x) => x.callsPerSec))} calls/s, ${spread(lf.map((x) => x.cpuUsPerCall))} µs; ` +
        `data plane ${spread(dp.map((x) => x.callsPerSec))} calls/s, ${spread(dp.map((x) => x.cpuUsPerCall))} µs; main port ${spread(mp.map((x) => x.callsPerSec))} calls/s, ${spread(mp.map((x) => x.cpuUsPerCall))} µs (${String(rounds)} rounds)\n`,
    );
    process.stderr.write(`routing-floor: coordinator idle ${idleMsPerSec.toFixed(1)} ms CPU/s (${((idleMsPerSec * 1000) / m(dp, "callsPerSec")).toFixed(0)} µs per data-plane call at its median rate); load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}\n`);
    if (other !== undefined) process.stderr.write(`routing-floor: data plane of ${compareRoot ?? ""} ${spread(op.map((x) => x.callsPerSec))} calls/s, ${spread(op.map((x) => x.cpuUsPerCall))} µs\n`);
    const compared: BenchResult[] =
      other === undefined
        ? []
        : [
            { name: "Predict, 64 callers, data plane: forwarding process CPU per call", baseline: `${compareRoot ?? ""}'s data plane, same rounds`, ours: m(dp, "cpuUsPerCall"), baselineValue: m(op, "cpuUsPerCall"), unit: "µs", higherIsBetter: false },
            { name: "Predict, 64 callers, other checkout's data plane: CPU per call", baseline: "bare node:http2 forwarder, same run", ours: m(op, "cpuUsPerCall"), baselineValue: m(fr, "cpuUsPerCall"), unit: "µs", higherIsBetter: false },
          ];
    return [
      { name: "Predict, 64 callers, data plane: throughput", baseline: "bare node:http2 forwarder, same run", ours: m(dp, "callsPerSec"), baselineValue: m(fr, "callsPerSec"), unit: "calls/s", higherIsBetter: true },
      { name: "Predict, 64 callers, data plane: forwarding process CPU per call", baseline: "bare node:http2 forwarder, same run", ours: m(dp, "cpuUsPerCall"), baselineValue: m(fr, "cpuUsPerCall"), unit: "µs", higherIsBetter: false },
      { name: "Predict, 64 callers, main port: throughput", baseline: "bare node:http2 forwarder, same run", ours: m(mp, "callsPerSec"), baselineValue: m(fr, "callsPerSec"), unit: "calls/s", higherIsBetter: true },
      { name: "Predict, 64 callers, main port: forwarding process CPU per call", baseline: "bare node:http2 forwarder, same run", ours: m(mp, "cpuUsPerCall"), baselineValue: m(fr, "cpuUsPerCall"), unit: "µs", higherIsBetter: false },
      { name: "Predict, 64 callers, bare forwarder: throughput", baseline: "straight to backend-sim, same run", ours: m(fr, "callsPerSec"), baselineValue: median(s), unit: "calls/s", higherIsBetter: true },
      { name: "Predict, 64 callers, lean server + client alone (lean-h2-forwarder.ts): CPU per call", baseline: "bare node:http2 forwarder, same run", ours: m(lf, "cpuUsPerCall"), baselineValue: m(fr, "cpuUsPerCall"), unit: "µs", higherIsBetter: false },
      ...compared,
    ];
  } finally {
    await other?.close();
    await coordinator.close();
  }
}
