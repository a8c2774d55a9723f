/**
 * A LocalAI-style backend image end to end: the Python compatibility backend
 * (test/compat/python-backend, its stubs generated from backend.proto) packed
 * as an OCI image whose layer unpacks to a directory with `run.sh`, pushed by
 * `skopeo` to Debian's `docker-registry`, named by digest in a real agent's
 * catalog. The first call through a real coordinator makes the agent install
 * the bundle and launch it with the localai profile; a wrong digest and a
 * registry that is down fail the load naming the bundle, spawning nothing,
 * and leave a failed load job in phase RESOLVING (the image's manifest read).
 * Before the first call, placement already counts the image: the agent read
 * its manifest in the background and reports its layers' size.
 */
import { mkdir, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { createClient } from "@warden/grpc";
import { formatBytes } from "@warden/placement";
import { AgentService, InstanceState, LoadJobPhase, LoadJobState } from "@warden/proto";
import { simCatalog, tempDir, uniqueTag } from "./support/agent-harness.js";
import { startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { testPortRange } from "./support/port-range.js";
import { pushImage, startRegistry, tarOf, type Registry } from "./support/oci-registry.js";
import { livePythonBackends, preparePythonBackend, readBackendRecord } from "./support/python-backend.js";

const fileTag = uniqueTag("bundle-e2e");
const text = (b: Uint8Array | undefined): string => new TextDecoder().decode(b);
let dir: string;
let models: string;
let recordDir: string;
let registry: Registry;
let manifest: string;
let layerBytes = 0;
let t: TestCoordinator;
let agent: RemoteAgent;

const bundleScript = (): string => join(models, ".warden-cache", "backends", manifest, "backend.py");

beforeAll(async () => {
  dir = await tempDir("warden-bundle-e2e");
  models = join(dir, "models");
  recordDir = join(dir, "records");
  await mkdir(models);
  await mkdir(recordDir);
  await writeFile(join(models, "tiny.gguf"), "GGUF");
  registry = await startRegistry(dir);
  // The backend as LocalAI's images hold it: run.sh, backend.py and the generated stubs at the layer's root.
  const src = join(dir, "python-src");
  await mkdir(src);
  await preparePythonBackend(src);
  const entries = [];
  for (const name of (await readdir(src)).sort()) if (!name.startsWith("__")) entries.push({ name, body: await readFile(join(src, name)), mode: name === "run.sh" ? 0o755 : 0o644 });
  const pushed = await pushImage(join(dir, "layout"), registry.host, "localai/python-compat", "v1", [tarOf(entries)]);
  manifest = pushed.manifest;
  layerBytes = pushed.layers.reduce((n, l) => n + l.size, 0);
  const image = `oci+http://${registry.host}/localai/python-compat`;
  t = await startTestCoordinator({
    embeddedAgent: false,
    models: [
      { id: "tiny", backend: "py-bundle", modelFile: "tiny.gguf", backendModel: "org/tiny" },
      { id: "wrong-digest", backend: "py-wrong", modelFile: "tiny.gguf" },
      { id: "registry-down", backend: "py-down", modelFile: "tiny.gguf" },
    ],
    policy: { enforcementRetries: 600 },
    extra: { inferenceListen: "127.0.0.1:0" },
  });
  agent = await startRemoteAgent({
    coordinator: t.c.address,
    nodeId: "bundle-node",
    tag: fileTag,
    config: {
      modelsPath: models,
      catalog: {
        "backend-sim": simCatalog(fileTag),
        "py-bundle": { bundle: { source: `${image}:v1@sha256:${manifest}` }, env: { COMPAT_RECORD_DIR: recordDir, LOCALAI_BACKEND_PARENT_WATCH_INTERVAL: "100ms" } },
        "py-wrong": { bundle: { source: `${image}@sha256:${"e".repeat(64)}` } },
        // a port nothing listens on: the registry of this entry is down
        "py-down": { bundle: { source: `oci+http://127.0.0.1:${String(testPortRange(1).min)}/localai/python-compat@sha256:${"d".repeat(64)}` } },
      },
    },
  });
  await until("agent registered", () => t.c.nodes.get("bundle-node")?.state === "ready" && t.c.nodes.get("bundle-node")?.inventory !== undefined);
}, 180_000);

afterAll(async () => {
  for (const i of (await t.admin.listModels({})).instances) await t.admin.unloadModel({ model: i.model }).catch(() => undefined);
  await agent.cleanup();
  const leaked = await livePythonBackends(bundleScript());
  for (const pid of leaked) process.kill(pid, "SIGKILL");
  await t.close();
  await registry.stop();
  await rm(dir, { recursive: true, force: true });
  expect(leaked).toEqual([]);
});

describe("backend bundle from an OCI registry", () => {
  it("the first call installs the image and runs its run.sh with the localai profile", async () => {
    // Not installed yet: the image's size (its layers, from the manifest read in the background) is what a placement pulls;
    // an image whose registry is down has an unknown size and rules nothing out.
    const pull = `; pull ${formatBytes(layerBytes)} (bundle ${formatBytes(layerBytes)}))`;
    await until("tiny explained with the image's size", async () => (await t.admin.explainPlacement({ model: "tiny" })).nodes[0]?.reason.endsWith(pull), 60_000);
    expect((await t.admin.explainPlacement({ model: "registry-down" })).nodes[0]?.reason).toMatch(/^fits .*; bundle not installed, size unknown\)$/);
    const reply = await t.inference.predict({ model: "tiny", options: { Prompt: "hi" } });
    expect(text(reply.reply?.message)).toBe("org/tiny:hi");
    const inst = (await t.admin.listModels({})).instances.find((i) => i.model === "tiny" && i.state === InstanceState.READY);
    if (inst === undefined) throw new Error("tiny not ready");
    const bundle = join(models, ".warden-cache", "backends", manifest);
    expect((await readdir(bundle)).sort()).toEqual(expect.arrayContaining(["backend.py", "backend_pb2.py", "backend_pb2_grpc.py", "run.sh"]));
    const [pid] = await livePythonBackends(bundleScript());
    if (pid === undefined) throw new Error("the bundle's backend is not running");
    const rec = await until("the backend's record", () => readBackendRecord(recordDir, pid));
    // as LocalAI launches it: only --addr, from the bundle's directory, the models path as HF_HOME
    expect(rec.argv.slice(1)).toEqual(["--addr", inst.address]);
    expect(rec.cwd).toBe(bundle);
    expect(rec.env).toMatchObject({ HF_HOME: models, LOCALAI_BACKEND_PARENT_WATCH: "false" });
  }, 180_000);

  it("a wrong digest and a registry that is down fail the load naming the bundle, in phase resolving; nothing is installed or spawned", async () => {
    const before = await readdir(join(models, ".warden-cache", "backends"));
    for (const [model, why] of [
      ["wrong-digest", `has no manifest "sha256:${"e".repeat(64)}" (HTTP 404: unknown tag or digest)`],
      ["registry-down", "cannot reach the registry 127.0.0.1:"],
    ] as const) {
      const err = await t.inference.predict({ model, options: { Prompt: "x" } }).then(() => undefined, (e: unknown) => e);
      expect(err, model).toBeInstanceOf(Error);
      expect((err as Error).message, model).toContain("backend bundle oci+http://");
      expect((err as Error).message, model).toContain(why);
      // The manifest read is where it failed: the failed load job (ListModels) says so.
      const job = (await t.admin.listModels({})).replicas.find((r) => r.model === model)?.loadJob;
      expect([job?.state, job?.phase, job?.nodeId], model).toEqual([LoadJobState.FAILED, LoadJobPhase.RESOLVING, "bundle-node"]);
    }
    expect(await readdir(join(models, ".warden-cache", "backends"))).toEqual(before);
    expect(await livePythonBackends(bundleScript())).toHaveLength(1);
  }, 180_000);

  it("the agent lists, installs and removes its catalog's bundles; never one a live process uses", async () => {
    const client = createClient(AgentService, agent.address);
    const failure = async (p: Promise<unknown>): Promise<WardenError> => {
      const e: unknown = await p.then(() => undefined, (x: unknown) => x);
      if (!(e instanceof WardenError)) throw new Error(`expected a WardenError, got ${String(e)}`);
      return e;
    };
    try {
      const listed = (await client.listBundles({})).bundles.map((b) => [b.backend, b.sha256, b.installed, b.running]);
      expect(listed).toEqual([
        ["py-bundle", manifest, true, 1],
        ["py-wrong", "e".repeat(64), false, 0],
        ["py-down", "d".repeat(64), false, 0],
      ]);
      const busy = await failure(client.removeBundle({ backend: "py-bundle" }));
      expect([busy.code, busy.message]).toEqual([Code.FailedPrecondition, expect.stringContaining("is in use: 1 live process(es) of py-bundle")]);
      const notBundle = await failure(client.installBundle({ backend: "backend-sim" }));
      expect([notBundle.code, notBundle.message]).toEqual([Code.InvalidArgument, expect.stringContaining("is not a bundle entry of this agent's catalog (bundles: py-bundle, py-wrong, py-down)")]);
      const wrong = await failure(client.installBundle({ backend: "py-wrong" }));
      expect([wrong.code, wrong.message]).toEqual([Code.NotFound, expect.stringContaining("has no manifest")]);
      await t.admin.unloadModel({ model: "tiny" });
      await until("the bundle's backend exited", async () => (await livePythonBackends(bundleScript())).length === 0, 60_000);
      // the agent may still be reaping: the remove is refused until the table has no live process
      await until("removed", async () => (await client.removeBundle({ backend: "py-bundle" }).catch(() => ({ removed: false }))).removed, 60_000);
      expect(await readdir(join(models, ".warden-cache", "backends"))).toEqual([]);
      expect(await client.installBundle({ backend: "py-bundle" })).toMatchObject({ alreadyInstalled: false, bundle: { installed: true, sha256: manifest } });
      expect(await client.installBundle({ backend: "py-bundle" })).toMatchObject({ alreadyInstalled: true });
      expect(await readdir(join(models, ".warden-cache", "backends"))).toEqual([manifest]);
    } finally {
      client.close();
    }
  }, 180_000);
});
