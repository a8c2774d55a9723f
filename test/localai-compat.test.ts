/**
 * A LocalAI backend in another language, run by Warden the way LocalAI runs it
 *: the Python backend of test/compat/ (stubs generated from
 * proto/backend/backend.proto at test time) started by a real agent process
 * through a `profile: localai` catalog entry, registered with a real
 * coordinator, called over loopback gRPC. Checked: argv and environment as
 * LocalAI gives them, the LoadModel fields (absolute file, GPU layers,
 * ModelPath, backendModel), Predict and PredictStream through the coordinator
 * with cancel and in-flight back to 0, unload (Free then stop), adoption after
 * an agent restart (parent watch off), and path traversal / symlink escapes
 * refused. Embedding and TTS go through the data plane's backend.Backend
 * (the model named in `warden-model` metadata), with the backendModel written
 * as ModelIdentity.
 */
import { Metadata } from "@grpc/grpc-js";
import { mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, isWardenError } from "@warden/common";
import { createClient, type Client } from "@warden/grpc";
import { AgentService, Backend, BackendState, InstanceState, StatusResponse_State, UnloadOutcome, type ModelInstance } from "@warden/proto";
import { newIncarnation, pidAlive, simCatalog, uniqueTag } from "./support/agent-harness.js";
import { startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { livePythonBackends, preparePythonBackend, readBackendRecord, type PythonBackend } from "./support/python-backend.js";

const fileTag = uniqueTag("localai-compat");
const text = (b: Uint8Array | undefined): string => new TextDecoder().decode(b);

let dir: string;
let models: string;
let recordDir: string;
let py: PythonBackend;
let t: TestCoordinator;
let agent: RemoteAgent;
let agentClient: Client<typeof AgentService>;

/** The agent's own environment: what the allow-list draws from (the secrets must never reach a backend). */
const agentEnv = {
  LD_LIBRARY_PATH: "/opt/test/lib",
  CUDA_CACHE_PATH: "/tmp/cuda-cache-test",
  NVIDIA_DRIVER_CAPABILITIES: "compute,utility",
  HF_TOKEN: "hf-test-token",
  HF_HOME: "",
  LD_PRELOAD: "/nonexistent/evil.so",
  UNRELATED_SECRET: "do-not-pass",
};

const modelConfigs = (): Record<string, unknown>[] => [
  // A GGUF-style model: the file relative to modelsPath, every layer on the GPU by default, an upstream name with "/".
  { id: "tiny", backend: "python-compat", modelFile: "tiny.gguf", backendModel: "org/tiny-model", threads: 3, options: ["cache_type_k:q8_0"] },
  { id: "streamer", backend: "python-compat", modelFile: "tiny.gguf", gpuLayers: 20, contextSize: 8192, mmap: false, flashAttention: "on", cuda: true, options: ["token_delay_ms:20"] },
  { id: "survivor", backend: "python-compat", modelFile: "tiny.gguf" },
  { id: "escaper", backend: "python-compat", modelFile: "escape.gguf" },
];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-localai-compat-"));
  models = join(dir, "models");
  recordDir = join(dir, "records");
  await mkdir(models);
  await mkdir(recordDir);
  await mkdir(join(dir, "backends", "python-compat"), { recursive: true });
  py = await preparePythonBackend(join(dir, "backends", "python-compat"));
  await writeFile(join(models, "tiny.gguf"), "GGUF");
  await writeFile(join(dir, "secret.txt"), "outside the models directory");
  await symlink(join(dir, "secret.txt"), join(models, "escape.gguf"));
  t = await startTestCoordinator({ embeddedAgent: false, models: modelConfigs(), policy: { enforcementRetries: 600 }, extra: { inferenceListen: "127.0.0.1:0", loadWait: "600s" } });
  agent = await startRemoteAgent({
    coordinator: t.c.address,
    nodeId: "gpu-node",
    tag: fileTag,
    env: agentEnv,
    config: {
      modelsPath: models,
      catalog: {
        "backend-sim": simCatalog(fileTag),
        "python-compat": { profile: "localai", command: py.command, env: { COMPAT_RECORD_DIR: recordDir, LOCALAI_BACKEND_PARENT_WATCH_INTERVAL: "100ms" } },
      },
    },
  });
  agentClient = createClient(AgentService, agent.address);
  await until("agent registered", () => t.c.nodes.get("gpu-node")?.state === "ready" && t.c.nodes.get("gpu-node")?.inventory !== undefined);
}, 120_000);

afterAll(async () => {
  // Unload what the tests left loaded: stopped through Warden, every process it started must be gone.
  for (const i of (await t.admin.listModels({})).instances) await t.admin.unloadModel({ model: i.model }).catch(() => undefined);
  agentClient.close();
  await agent.cleanup();
  const leaked = await livePythonBackends(py.script);
  for (const pid of leaked) process.kill(pid, "SIGKILL");
  await t.close();
  await rm(dir, { recursive: true, force: true });
  expect(leaked).toEqual([]);
});

async function instance(model: string): Promise<ModelInstance | undefined> {
  return (await t.admin.listModels({})).instances.find((i) => i.model === model && i.state === InstanceState.READY);
}

async function pidOf(incarnation: string): Promise<number> {
  const r = await agentClient.listBackends({});
  const e = r.backends.find((b) => b.incarnation === incarnation);
  if (e === undefined) throw new Error(`agent does not list ${incarnation}`);
  return e.pid;
}

describe("LocalAI's Python backend under Warden", () => {
  it("is launched as LocalAI launches it and gets the LoadModel LocalAI sends", async () => {
    const reply = await t.inference.predict({ model: "tiny", options: { Prompt: "hi" } });
    // The backend checks ModelIdentity against the name it loaded: the backendModel, not Warden's id.
    expect(text(reply.reply?.message)).toBe("org/tiny-model:hi");
    const inst = await instance("tiny");
    if (inst === undefined) throw new Error("tiny not ready");
    const pid = await pidOf(inst.incarnation);
    const rec = await readBackendRecord(recordDir, pid);
    if (rec === undefined) throw new Error("no record written");
    expect(rec.argv.slice(1)).toEqual(["--addr", inst.address]);
    expect(rec.cwd).toBe(py.dir);
    expect(rec.env).toMatchObject({
      PATH: process.env.PATH,
      LD_LIBRARY_PATH: "/opt/test/lib",
      CUDA_CACHE_PATH: "/tmp/cuda-cache-test",
      NVIDIA_DRIVER_CAPABILITIES: "compute,utility",
      HF_TOKEN: "hf-test-token",
      // the agent's HF_HOME is empty: unset for LocalAI (os.Getenv == ""), so it points at the models path
      HF_HOME: models,
      TRANSFORMERS_CACHE: models,
      HUGGINGFACE_HUB_CACHE: models,
      LOCALAI_BACKEND_PARENT_WATCH: "false",
      LOCALAI_BACKEND_PARENT_WATCH_INTERVAL: "100ms",
      COMPAT_RECORD_DIR: recordDir,
      WARDEN_NODE_ID: "gpu-node",
      WARDEN_INCARNATION: inst.incarnation,
    });
    if (process.env.HOME !== undefined) expect(rec.env.HOME).toBe(process.env.HOME);
    expect(rec.env.WARDEN_AGENT_TOKEN).toMatch(/^[0-9a-f]{16}$/);
    expect(rec.env).not.toHaveProperty("LD_PRELOAD");
    expect(rec.env).not.toHaveProperty("UNRELATED_SECRET");
    expect(rec.loadModel).toEqual({
      Model: "org/tiny-model",
      ModelFile: join(models, "tiny.gguf"),
      ModelPath: models,
      ContextSize: 4096,
      NBatch: 512,
      NGPULayers: 99_999_999,
      Threads: 3,
      MMap: true,
      FlashAttention: "auto",
      CUDA: false,
      Options: ["cache_type_k:q8_0"],
    });
  });

  it("streams, and a cancelled stream leaves nothing in flight; Embedding and TTS route through Warden", async () => {
    const ctl = new AbortController();
    const got: string[] = [];
    const stream = t.inference.predictStream({ model: "streamer", options: { Prompt: "go", Tokens: 100_000 } }, { signal: ctl.signal });
    const err = await (async () => {
      for await (const r of stream) {
        got.push(text(r.reply?.message));
        if (got.length === 3) ctl.abort();
      }
    })().catch((e: unknown) => e);
    expect(isWardenError(err, Code.Canceled)).toBe(true);
    expect(got).toEqual(["streamer:0", "streamer:1", "streamer:2"]);
    const inst = await until("in-flight back to 0", async () => {
      const i = await instance("streamer");
      return i !== undefined && i.inFlight === 0 ? i : undefined;
    });
    const rec = await readBackendRecord(recordDir, await pidOf(inst.incarnation));
    expect(rec?.loadModel).toMatchObject({ Model: "streamer", NGPULayers: 20, ContextSize: 8192, MMap: false, FlashAttention: "on", CUDA: true, Threads: expect.any(Number) as number });
    const backend = createClient(Backend, inst.address);
    const dataPlane = createClient(Backend, t.c.inferenceAddress ?? "");
    const naming = (model: string): { metadata: Metadata } => {
      const md = new Metadata();
      md.set("warden-model", model);
      return { metadata: md };
    };
    try {
      // the backend itself saw the cancel: its stream ended
      await until("backend stream ended", async () => ((await backend.status({})).memory?.breakdown.active_streams === 0n ? true : undefined));
      expect((await backend.status({})).state).toBe(StatusResponse_State.READY);
      // Embedding and TTS through Warden's backend.Backend, as a LocalAI client calls them; Warden writes the identity.
      const emb = await dataPlane.embedding({ Embeddings: "hello" }, naming("streamer"));
      expect(emb.embeddings).toHaveLength(8);
      // "tiny" was loaded as "org/tiny-model": the identity Warden writes is its backendModel
      expect((await dataPlane.embedding({ Embeddings: "hello" }, naming("tiny"))).embeddings).toHaveLength(8);
      const wav = join(dir, "out.wav");
      expect((await dataPlane.tTS({ text: "hello", dst: wav }, naming("streamer"))).success).toBe(true);
      expect((await readFile(wav)).subarray(0, 4).toString()).toBe("RIFF");
      await until("in-flight back to 0 after the routed calls", async () => ((await t.admin.listModels({})).instances.every((i) => i.inFlight === 0) ? true : undefined));
      // Straight at the backend, a request for another model is refused as upstream refuses it.
      const wrong = await backend.predict({ Prompt: "x", ModelIdentity: "someone-else" }).catch((e: unknown) => e);
      expect(isWardenError(wrong, Code.NotFound)).toBe(true);
      expect((wrong as Error).message).toMatch(/model identity mismatch/);
    } finally {
      backend.close();
      dataPlane.close();
    }
  });

  it("unloads with Free then a stop, leaving no process", async () => {
    const inst = await instance("tiny");
    if (inst === undefined) throw new Error("tiny not ready");
    const pid = await pidOf(inst.incarnation);
    const res = await t.admin.unloadModel({ model: "tiny" });
    expect(res.outcome).toBe(UnloadOutcome.STOPPED);
    expect(await pidAlive(pid)).toBe(false);
    expect((await readBackendRecord(recordDir, pid))?.freed).toBe(true);
  });

  it("survives an agent restart and is adopted, not forgotten (parent watch off)", async () => {
    await t.inference.predict({ model: "survivor", options: { Prompt: "before" } });
    const inst = await instance("survivor");
    if (inst === undefined) throw new Error("survivor not ready");
    const pid = await pidOf(inst.incarnation);
    const oldAgentPid = agent.pid;
    await agent.stop();
    // Wait for the condition the parent watch reacts to: the backend was reparented.
    const backend = createClient(Backend, inst.address);
    try {
      await until("backend reparented", async () => {
        const ppid = Number((await readFile(`/proc/${String(pid)}/stat`, "utf8")).split(") ")[1]?.split(" ")[1]);
        return ppid !== oldAgentPid ? true : undefined;
      });
      await agent.restart();
      agentClient.close();
      agentClient = createClient(AgentService, agent.address);
      const listed = await agentClient.listBackends({});
      expect(listed.backends.find((b) => b.incarnation === inst.incarnation)).toMatchObject({ pid, state: BackendState.READY });
      expect(await pidAlive(pid)).toBe(true);
      // the parent watch never armed (a watch at 100 ms would have ended it by now)
      expect((await backend.status({})).memory?.breakdown.parent_watch_armed).toBe(0n);
      await until("coordinator sees it ready again", async () => ((await instance("survivor"))?.incarnation === inst.incarnation ? true : undefined));
      expect(text((await t.inference.predict({ model: "survivor", options: { Prompt: "after" } })).reply?.message)).toBe("survivor:after");
      expect(await pidAlive(pid)).toBe(true);
    } finally {
      backend.close();
    }
  });

  it("refuses path traversal and symlink escapes with a clear error, starting nothing", async () => {
    const before = (await livePythonBackends(py.script)).length;
    const err = await t.inference.predict({ model: "escaper", options: { Prompt: "x" } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toMatch(/modelFile: "escape\.gguf" leads outside the models directory .* through a symlink/);
    for (const modelFile of ["../secret.txt", "../../../../etc/passwd", "/etc/passwd", join(dir, "secret.txt")]) {
      const stream = agentClient.startBackend({ incarnation: newIncarnation(), model: "direct", backend: "python-compat", options: [], modelFile, contextSize: 0, gpuDevice: "" });
      const e = await (async () => {
        for await (const ev of stream) return ev;
        return undefined;
      })().catch((x: unknown) => x);
      expect(isWardenError(e, Code.InvalidArgument), modelFile).toBe(true);
      expect((e as Error).message).toMatch(/modelFile: (must not contain a "\.\." segment|".*" is outside the models directory)/);
    }
    expect((await livePythonBackends(py.script)).length).toBe(before);
    // the coordinator refuses a ".." in its config already
    const { resolveCoordinatorConfig } = await import("@warden/coordinator");
    expect(() => resolveCoordinatorConfig({ models: [{ id: "bad", backend: "python-compat", modelFile: "../x.gguf" }] })).toThrow(/models\[0\]\.modelFile: must not contain a "\.\." segment/);
    expect((await stat(join(dir, "secret.txt"))).isFile()).toBe(true);
  });
});
