/**
 * The workload trace of a real coordinator (embedded agent, backend-sim
 * processes, real gRPC): calls, loads and evictions are recorded with what
 * a replay needs, and no prompt or reply ever reaches the files.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createClient } from "@warden/grpc";
import { Backend } from "@warden/proto";
import { isTraceHeader, parseTraceLine, replayInput, type TraceLine } from "@warden/whatif";
import { listSegments } from "../services/coordinator/src/trace/trace-recorder.js";
import { traceDir } from "../services/coordinator/src/trace/workload-trace.js";
import { simModel, startTestCoordinator, type TestCoordinator } from "./support/coordinator-harness.js";

const root = resolve(import.meta.dirname, "..");
let t: TestCoordinator | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

async function traceText(dir: string): Promise<string> {
  let text = "";
  for (const s of await listSegments(traceDir(dir))) text += await readFile(s.path, "utf8");
  return text;
}

describe("workload trace (real coordinator)", () => {
  it("records calls (with their class and, routed as bytes, their sizes), loads, evictions and operators' changes, and never a prompt or a reply", async () => {
    t = await startTestCoordinator({ models: [simModel("m1", { memoryEstimate: "1GiB" })] });
    const prompt = "zebra-quartz-7731 tell me a secret";
    for (let i = 0; i < 2; i++) {
      const r = await t.inference.predict({ model: "m1", options: { Prompt: `${prompt} #${String(i)}` } });
      expect(new TextDecoder().decode(r.reply?.message)).toContain("m1");
    }
    // The Backend router sees the call as bytes: its line has both sizes, and the class the caller asked for.
    const raw = createClient(Backend, t.c.address, { headers: { "warden-priority": "sheddable" } });
    try {
      const r = await raw.predict({ Prompt: `${prompt} #2`, ModelIdentity: "m1" }, { timeoutMs: 60_000 });
      expect(new TextDecoder().decode(r.message)).toContain("m1");
    } finally {
      raw.close();
    }
    await t.admin.updatePolicy({ patch: { idleTimeoutMs: 600_000n } });
    await t.admin.scaleModel({ model: "m1", min: 0, max: 1 });
    await t.admin.drainNode({ nodeId: "local" });
    await t.waitForEvent("node.drained");
    await t.admin.undrainNode({ nodeId: "local" });
    // ExportTrace flushes first: the export holds the calls just made, and nothing before --since.
    let exported = "";
    for await (const c of t.admin.exportTrace({ sinceUnixMs: 0n }, { timeoutMs: 30_000 })) exported += new TextDecoder().decode(c.data);
    expect(exported.split("\n").filter((l) => l.includes('"t":"call"'))).toHaveLength(3);
    expect(exported).not.toContain("zebra-quartz");
    let future = "";
    for await (const c of t.admin.exportTrace({ sinceUnixMs: BigInt(Date.now() + 3_600_000) }, { timeoutMs: 30_000 })) future += new TextDecoder().decode(c.data);
    expect(future.trimEnd().split("\n").every((l) => l.includes('"kind":"warden-trace"'))).toBe(true);
    // Not spawnSync: the coordinator answering it runs in this process.
    const cli = await promisify(execFile)(process.execPath, ["--import", "tsx", join(root, "services", "cli", "src", "main.ts"), "trace", "export", "--since", "1h", "--addr", t.c.address], { cwd: root, env: { ...process.env, NO_COLOR: "1" }, encoding: "utf8", timeout: 90_000 });
    expect(cli.stderr).toBe("");
    expect(cli.stdout.split("\n").filter((l) => l.includes('"t":"call"'))).toHaveLength(3);
    const dir = t.dir;
    // close() flushes the trace; the files stay (the harness removes the dir after, so read first).
    await t.c.close({ stopBackends: true });
    const text = await traceText(dir);
    expect(text).not.toContain("zebra-quartz");
    expect(text).not.toContain("secret");
    const lines: TraceLine[] = [];
    text
      .trimEnd()
      .split("\n")
      .forEach((l, i) => {
        const p = parseTraceLine(l, i + 1);
        if (p !== undefined && !isTraceHeader(p)) lines.push(p);
      });
    const calls = lines.filter((l) => l.t === "call");
    expect(calls).toHaveLength(3);
    expect(calls.every((c) => c.m === "m1" && c.ok)).toBe(true);
    expect(calls.map((c) => c.cls)).toEqual(["standard", "standard", "sheddable"]);
    // Sizes only where the call was routed as bytes; the prompt's length is in them, never its text.
    expect(calls[0]?.reqBytes).toBeUndefined();
    expect(calls[2]?.reqBytes).toBeGreaterThan(prompt.length);
    expect(calls[2]?.respBytes).toBeGreaterThan(0);
    // The first call waited for the load (a cold start); the load is recorded with its node and duration.
    expect(lines.filter((l) => l.t === "load")).toEqual([expect.objectContaining({ m: "m1", node: "local" })]);
    expect(lines.filter((l) => l.t === "stop")).toEqual([expect.objectContaining({ m: "m1", node: "local", reason: "drain" })]);
    expect(lines.some((l) => l.t === "node" && l.node === "local" && l.ev === "joined")).toBe(true);
    // Operators' changes with what a replay needs to make them again.
    expect(lines.filter((l) => l.t === "node" && l.ev !== "joined").map((l) => l.t === "node" && l.ev)).toEqual(["drain", "undrain"]);
    expect(lines.filter((l) => l.t === "admin")).toEqual([expect.objectContaining({ op: "policy", changes: ["idleTimeoutMs=600000"] }), expect.objectContaining({ op: "scale", m: "m1", min: 0, max: 1 })]);
    const input = replayInput(lines);
    expect(input.calls).toHaveLength(3);
    expect(input.loadMs.get("m1")).toBeGreaterThanOrEqual(0);
    // Nothing dropped, and the coordinator's /metrics says so (a drop would show here and as a gap line).
    expect(input.gaps).toEqual([]);
    const dropped = await t.c.metricsRegistry.getSingleMetricAsString("warden_trace_dropped_lines_total");
    expect(dropped).toContain('warden_trace_dropped_lines_total{reason="buffer-full"} 0');
    expect(dropped).toContain('warden_trace_dropped_lines_total{reason="write-failed"} 0');
  });

  it("trace.enabled false writes nothing", async () => {
    t = await startTestCoordinator({ models: [simModel("m1")], extra: { trace: { enabled: false } } });
    await t.inference.predict({ model: "m1", options: { Prompt: "hi" } });
    const admin = t.admin;
    const off = await (async () => {
      for await (const _ of admin.exportTrace({}, { timeoutMs: 30_000 })) break;
    })().catch((e: unknown) => e);
    expect(String(off)).toContain("trace.enabled is false");
    expect(t.c.metricsRegistry.getSingleMetric("warden_trace_dropped_lines_total")).toBeUndefined();
    const dir = t.dir;
    await t.c.close({ stopBackends: true });
    expect(await listSegments(traceDir(dir))).toEqual([]);
  });
});
