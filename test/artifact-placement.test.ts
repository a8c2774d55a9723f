/**
 * Disk-aware placement and pull progress through real processes: a
 * coordinator, two remote agents with an artifact cache each (one with a disk
 * budget too small for the model's file), backend-sim, and a real HTTP
 * server sending the file slowly. Placement skips the node without room and
 * says why, the load job shows the pull (phase, bytes, rate) in ListModels and
 * in `warden models load`'s progress line, ExplainPlacement then says
 * "cached" for the node that holds the file, and a 404 fails the load in the
 * pulling phase naming the artifact.
 */
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { spawn } from "node:child_process";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, LoadJobPhase, LoadJobState, NodeState, type Event, type LoadJob } from "@warden/proto";
import { simModel, until } from "./support/coordinator-harness.js";
import { uniqueTag } from "./support/agent-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { bytesOf, sha256Hex, startArtifactServer, type ArtifactServer } from "./support/artifact-server.js";
import { freePort } from "./support/free-port.js";

const fileBytes = 2_000_000;
let dir = "";
let server: ArtifactServer;
let coord: CoordinatorProcess | undefined;
const agents: RemoteAgent[] = [];
let admin: Client<typeof AdminService>;
const events: Event[] = [];
const stopWatch = new AbortController();
let sha = "";

function artifactModel(id: string, source: string, sha256: string): Record<string, unknown> {
  return { ...simModel(id, { knobs: { model_file_sha256: sha256 } }), modelFile: "weights.bin", artifacts: [{ source, sha256, sizeBytes: fileBytes, path: "weights.bin" }] };
}

const root = resolve(import.meta.dirname, "..");
const cliBin = join(root, "services", "cli", "bin", "warden.js");

/** `warden models load <model>` as a child process; its stderr (the progress lines) readable while it runs. */
function wardenLoad(model: string): { stderr(): string; done: Promise<{ code: number | null; stdout: string; stderr: string }> } {
  const p = spawn(process.execPath, [cliBin, "models", "load", model, "--addr", coord?.address ?? "", "--timeout", "120s"], { cwd: root, env: { ...process.env, NO_COLOR: "1" } });
  let stdout = "";
  let stderr = "";
  p.stdout.on("data", (b: Buffer) => (stdout += b.toString()));
  p.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolveDone) => {
    const kill = setTimeout(() => p.kill("SIGKILL"), 150_000);
    p.on("close", (code) => {
      clearTimeout(kill);
      resolveDone({ code, stdout, stderr });
    });
  });
  return { stderr: () => stderr, done };
}

async function jobOf(model: string): Promise<LoadJob | undefined> {
  return (await admin.listModels({})).replicas.find((r) => r.model === model)?.loadJob;
}

async function verdicts(model: string): Promise<Record<string, string>> {
  const r = await admin.explainPlacement({ model });
  return Object.fromEntries(r.nodes.map((n) => [n.nodeId, n.reason]));
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-artifact-placement-"));
  server = await startArtifactServer();
  const body = bytesOf(fileBytes, 7);
  sha = sha256Hex(body);
  server.files.set("/weights.bin", body);
  coord = await startCoordinatorProcess(join(dir, "coord.yaml"), {
    listen: `127.0.0.1:${String(await freePort())}`,
    httpListen: "127.0.0.1:0",
    stateDir: join(dir, "coord-state"),
    embeddedAgent: false,
    recoveryWindow: "200ms",
    models: [artifactModel("m", `${server.url}/weights.bin`, sha), artifactModel("m2", `${server.url}/weights.bin`, sha), artifactModel("gone", `${server.url}/missing.bin`, "9".repeat(64))],
  });
  const tag = uniqueTag("artifact-placement");
  // "a-small" sorts first: without the disk check it would win every tie.
  for (const [nodeId, budget] of [["a-small", 1_000_000], ["b-roomy", undefined]] as const) {
    const modelsPath = join(dir, nodeId, "models");
    await mkdir(modelsPath, { recursive: true });
    agents.push(await startRemoteAgent({ coordinator: coord.address, nodeId, tag, config: { modelsPath, maxReplicasPerModel: 2, ...(budget === undefined ? {} : { artifactCacheBudget: budget }) } }));
  }
  admin = createClient(AdminService, coord.address);
  await until("both nodes ready", async () => (await admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 2, 60_000);
  void (async () => {
    for await (const r of admin.watchEvents({ types: ["load.failed"], nodeId: "", model: "" }, { signal: stopWatch.signal })) if (r.event !== undefined) events.push(r.event);
  })().catch(() => undefined);
}, 180_000);

afterAll(async () => {
  stopWatch.abort();
  admin.close();
  for (const a of agents) await a.cleanup();
  await coord?.kill();
  await server.close();
  await rm(dir, { recursive: true, force: true });
}, 60_000);

describe("placement knows the disk; a pull is part of the load job", { timeout: 240_000 }, () => {
  it("skips the node whose cache cannot hold the file, shows the pull in the load job, then explains the holder as cached", async () => {
    // The agents' first heartbeats carry their caches: the small one is ruled out with the bytes.
    // (Nothing is placed on a node before its first inventory: wait until both have reported.)
    const before = await until("the small node ruled out on disk, the roomy one reported", async () => {
      const v = await verdicts("m");
      return v["a-small"]?.startsWith("no disk room") === true && v["b-roomy"]?.includes("pull") === true ? v : undefined;
    }, 60_000);
    expect(before["a-small"]).toBe("no disk room for its artifacts: pull 1.9 MiB, the artifact cache can make 976.6 KiB");
    expect(before["b-roomy"]).toMatch(/; pull 1\.9 MiB\)$/);
    // Slow enough to be seen pulling (about 10 s for the file), sped up once it was.
    server.chunkBytes = 20_000;
    server.paceMs = 100;
    const load = wardenLoad("m");
    const pulling = await until("m's job pulling with bytes", async () => {
      const j = await jobOf("m");
      return j?.phase === LoadJobPhase.PULLING && j.bytesDone > 0n ? j : undefined;
    }, 60_000);
    expect(pulling).toMatchObject({ state: LoadJobState.LOADING, nodeId: "b-roomy", bytesTotal: BigInt(fileBytes) });
    expect(pulling.bytesPerSecond).toBeGreaterThan(0n);
    // `warden models load`'s progress line (a line a second when stderr is not a terminal) says the pull as the job does.
    await until("the CLI's progress line shows the pull", () => /^loading m \(pulling, \d+%, [\d.]+ [KM]iB\/s\) on b-roomy … /m.test(load.stderr()), 60_000);
    server.paceMs = 0;
    const loaded = await load.done;
    expect(loaded.code, loaded.stderr).toBe(0);
    expect(loaded.stdout).toMatch(/^loaded m on b-roomy at /);
    // The holder's next heartbeat carries the digest: m2 (same file) is "cached" there.
    const after = await until("b-roomy explained as cached", async () => {
      const v = await verdicts("m2");
      return v["b-roomy"]?.endsWith("; cached)") === true ? v : undefined;
    }, 60_000);
    expect(after["a-small"]).toMatch(/^no disk room/);
    expect(server.requestsFor("/weights.bin")).toHaveLength(1);
  });

  it("a 404 fails the load in the pulling phase, naming the artifact, in the job and in load.failed", async () => {
    const err = await admin.loadModel({ model: "gone" }, { timeoutMs: 60_000 }).then(() => undefined, (e: unknown) => e as Error);
    expect(err?.message).toContain(`sha256 ${"9".repeat(64)}`);
    const job = await jobOf("gone");
    expect(job).toMatchObject({ state: LoadJobState.FAILED, phase: LoadJobPhase.PULLING, nodeId: "b-roomy" });
    expect(job?.reason).toContain("HTTP 404");
    const failed = await until("load.failed of gone", () => events.find((e) => e.model === "gone"), 60_000);
    expect(failed.payload.case === "loadFailed" ? failed.payload.value.phase : undefined).toBe(LoadJobPhase.PULLING);
  });
});
