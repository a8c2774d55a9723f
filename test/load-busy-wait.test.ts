/**
 * A load whose room is held by a busy instance is "not now", against real processes (a
 * coordinator, a remote agent, backend-sim, the CLI): with `limitPerNode: 1` and a call in flight
 * on the node's only instance, a load of another model is a waiting job (load.waiting, ListModels'
 * load_job naming the busy instance), waits `loadWait` — not the enforcement retries — and then
 * answers UNAVAILABLE with the reason: gRPC UNAVAILABLE, HTTP 503 with Retry-After, CLI exit 3 with
 * the progress line "waiting for a node: <reason>". The busy instance is left alone.
 */
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "@warden/common";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, InferenceService, InstanceState, LoadJobPhase, LoadJobState, NodeState, type Event, type LoadJob } from "@warden/proto";
import { simModel, until } from "./support/coordinator-harness.js";
import { uniqueTag } from "./support/agent-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { freePort } from "./support/free-port.js";
import { refusedWith } from "./support/refusal.js";

const root = resolve(import.meta.dirname, "..");
const cliMain = join(root, "services", "cli", "src", "main.ts");

/** The CLI as a child process, not blocking this one (the test polls the coordinator meanwhile). */
function warden(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const p = spawn(process.execPath, ["--import", "tsx", cliMain, ...args], { cwd: root, env: { ...process.env, NO_COLOR: "1" } });
    let stdout = "";
    let stderr = "";
    p.stdout.on("data", (b: Buffer) => (stdout += b.toString()));
    p.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
    const kill = setTimeout(() => p.kill("SIGKILL"), 120_000);
    p.on("close", (code) => {
      clearTimeout(kill);
      done({ code, stdout, stderr });
    });
  });
}

let dir = "";
let coord: CoordinatorProcess | undefined;
let agent: RemoteAgent | undefined;
let admin: Client<typeof AdminService> | undefined;
let inference: Client<typeof InferenceService> | undefined;
const busyCall = new AbortController();
const stopWatch = new AbortController();
const events: Event[] = [];

async function jobOf(model: string): Promise<LoadJob | undefined> {
  return (await admin!.listModels({})).replicas.find((r) => r.model === model)?.loadJob;
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-load-busy-"));
  coord = await startCoordinatorProcess(join(dir, "c.yaml"), {
    listen: `127.0.0.1:${String(await freePort())}`,
    httpListen: "127.0.0.1:0",
    stateDir: join(dir, "state"),
    embeddedAgent: false,
    recoveryWindow: "200ms",
    // Long enough to list the waiting job and see the CLI's progress line; the enforcement
    // retries (2 × 200 ms) would have ended the load long before.
    loadWait: "8s",
    policy: { limitPerNode: 1, busyCheck: false, enforcementRetries: 2, enforcementRetryInterval: "200ms" },
    models: [simModel("hold", { knobs: { predict_delay_ms: 600_000 } }), simModel("next")],
  });
  agent = await startRemoteAgent({ coordinator: coord.address, nodeId: "n1", tag: uniqueTag("load-busy") });
  admin = createClient(AdminService, coord.address);
  inference = createClient(InferenceService, coord.address);
  await until("n1 ready", async () => (await admin!.listNodes({})).nodes.some((n) => n.nodeId === "n1" && n.state === NodeState.READY), 60_000);
  await admin.loadModel({ model: "hold" }, { timeoutMs: 60_000 });
  // A call that stays in flight for the whole file: `hold` is busy, not evictable.
  void inference.predict({ model: "hold", options: { Prompt: "long" } }, { signal: busyCall.signal }).catch(() => undefined);
  await until("hold busy", async () => (await admin!.listModels({})).instances.find((i) => i.model === "hold" && i.inFlight === 1), 60_000);
  void (async () => {
    for await (const r of admin.watchEvents({ types: ["load.waiting", "load.failed"], nodeId: "", model: "next" }, { signal: stopWatch.signal })) if (r.event !== undefined) events.push(r.event);
  })().catch(() => undefined);
}, 180_000);

afterAll(async () => {
  stopWatch.abort();
  busyCall.abort();
  await admin?.unloadModel({ model: "hold", force: true }).catch(() => undefined);
  admin?.close();
  inference?.close();
  await agent?.cleanup();
  await coord?.kill();
  await rm(dir, { recursive: true, force: true });
}, 60_000);

describe("a load whose room a busy instance holds: not now, one answer everywhere (real coordinator, agent, HTTP and CLI)", { timeout: 240_000 }, () => {
  it("gRPC: a waiting job naming the busy instance, then UNAVAILABLE after loadWait with the reason; load.waiting then load.failed; the busy instance untouched", async () => {
    const load = refusedWith(admin!.loadModel({ model: "next" }, { timeoutMs: 120_000 }));
    const job = await until("next waiting", async () => {
      const j = await jobOf("next");
      return j?.state === LoadJobState.WAITING ? j : undefined;
    }, 60_000);
    expect(job).toMatchObject({ phase: LoadJobPhase.WAITING_FOR_NODE, model: "next" });
    expect(job.reason).toMatch(/limit on node "n1": blocked by 1 busy/);
    const e = await load;
    expect(e.code, e.message).toBe(Code.Unavailable);
    expect(e.rawMessage).toMatch(/cannot load model "next" now \(waited 8s\): limit on node "n1": blocked by 1 busy/);
    expect(String(e.details["reason"])).toContain("busy");
    await until("load.failed of next", () => events.find((x) => x.payload.case === "loadFailed"), 60_000);
    expect(events.map((x) => x.payload.case)).toEqual(["loadWaiting", "loadFailed"]);
    const failed = events[1]!;
    expect(failed.payload.case === "loadFailed" ? failed.payload.value.code : "").toBe("UNAVAILABLE");
    expect(await jobOf("next")).toMatchObject({ state: LoadJobState.FAILED, code: "UNAVAILABLE" });
    const listed = (await admin!.listModels({})).instances;
    expect(listed.map((i) => [i.model, i.state, i.inFlight])).toEqual([["hold", InstanceState.READY, 1]]);
  });

  it("HTTP: 503 with Retry-After and the reason in OpenAI's error shape", async () => {
    const r = await fetch(`http://${coord!.httpAddress ?? ""}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "next", messages: [{ role: "user", content: "hi" }] }),
      signal: AbortSignal.timeout(120_000),
    });
    const body = (await r.json()) as { error: { message: string; type: string } };
    expect(r.status, JSON.stringify(body)).toBe(503);
    expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(body.error.message).toContain("busy");
  });

  it("CLI models load: exit 3 naming the busy instance, the progress line says waiting for a node", async () => {
    const r = await warden(["models", "load", "next", "--addr", coord!.address, "--timeout", "90s"]);
    expect(r.code, r.stderr).toBe(3);
    expect(r.stderr).toMatch(/^warden: .*blocked by 1 busy/m);
    expect(r.stderr).toMatch(/^waiting for a node: .*blocked by 1 busy/m);
  });
});
