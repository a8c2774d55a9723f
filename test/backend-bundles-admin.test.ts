/**
 * Backend bundles managed through the coordinator: a real coordinator, two
 * real agent processes whose catalogs name a tarball bundle (served by a
 * real HTTP server; its run.sh starts backend-sim with the localai profile),
 * and the real `warden` CLI. Listing fans out to every node and names one
 * that cannot answer; install and remove go to one node or all, audited as
 * backend.installed / backend.removed; a remove while an instance uses the
 * backend is refused whole, nothing changed; bad input is a typed error
 * naming the field. The agent's bundle commands keep its leader-epoch fence
 * on disk as StopBackend does.
 */
import { execFile } from "node:child_process";
import { mkdir, readdir, rm, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { createClient } from "@warden/grpc";
import { eventTypeOf } from "@warden/events";
import { AgentService, InstanceState, type Event } from "@warden/proto";
import { tempDir, uniqueTag } from "./support/agent-harness.js";
import { startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { startArtifactServer, sha256Hex, type ArtifactServer } from "./support/artifact-server.js";
import { tarOf } from "./support/oci-registry.js";

const root = resolve(import.meta.dirname, "..");
const cliBin = join(root, "services", "cli", "bin", "warden.js");
const simMain = join(root, "services", "cli", "dist", "backend-sim.js");
const fileTag = uniqueTag("bundles-admin");
let dir: string;
let server: ArtifactServer;
let t: TestCoordinator;
const agents: RemoteAgent[] = [];
const modelsOf = new Map<string, string>();
let sha: string;

/** A LocalAI-style bundle: run.sh starting backend-sim with the arguments it is given (`--addr host:port`). */
function simBundle(version: string): Buffer {
  const runSh = `#!/bin/sh\nexec "${process.execPath}" "${simMain}" "$@"\n`;
  return tarOf([{ name: "run.sh", body: runSh, mode: 0o755 }, { name: "VERSION", body: version }]);
}

/** The real CLI, asynchronously (the coordinator runs in this process). */
function warden(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(process.execPath, [cliBin, ...args, "--addr", t.c.address], { cwd: root, env: { ...process.env, NO_COLOR: "1" }, timeout: 120_000 }, (err, stdout, stderr) => {
      done({ code: err === null ? 0 : typeof err.code === "number" ? err.code : 1, stdout, stderr });
    });
  });
}

async function failure(p: Promise<unknown>): Promise<WardenError> {
  const e: unknown = await p.then(() => undefined, (x: unknown) => x);
  if (!(e instanceof WardenError)) throw new Error(`expected a WardenError, got ${String(e)}`);
  return e;
}

const installedOn = async (nodeId: string): Promise<string[]> => readdir(join(modelsOf.get(nodeId) ?? "", ".warden-cache", "backends")).catch(() => []);
const eventsOf = (type: string): Event[] => t.events.filter((e) => eventTypeOf(e) === type);

beforeAll(async () => {
  dir = await tempDir("warden-bundles-admin");
  server = await startArtifactServer();
  const body = simBundle("v1");
  sha = sha256Hex(body);
  server.files.set("/sim-v1.tar.gz", body);
  t = await startTestCoordinator({
    embeddedAgent: false,
    models: [{ id: "bm", backend: "sim-bundle", modelFile: "tiny.gguf", selector: { node: "node-a" } }],
    policy: { enforcementRetries: 600 },
  });
  for (const nodeId of ["node-a", "node-b"]) {
    const models = join(dir, nodeId);
    await mkdir(models);
    await writeFile(join(models, "tiny.gguf"), "GGUF");
    modelsOf.set(nodeId, models);
    agents.push(
      await startRemoteAgent({
        coordinator: t.c.address,
        nodeId,
        tag: fileTag,
        config: {
          modelsPath: models,
          catalog: {
            "backend-sim": { builtin: "backend-sim" },
            "sim-bundle": { bundle: { source: `${server.url}/sim-v1.tar.gz`, sha256: sha, sizeBytes: body.length }, env: { WARDEN_AGENT_TEST_TAG: `${fileTag}-${nodeId}` } },
          },
        },
      }),
    );
  }
  await until("both agents registered", () => ["node-a", "node-b"].every((n) => t.c.nodes.get(n)?.state === "ready" && t.c.nodes.get(n)?.inventory !== undefined));
}, 180_000);

afterAll(async () => {
  for (const i of (await t.admin.listModels({})).instances) await t.admin.unloadModel({ model: i.model }).catch(() => undefined);
  for (const a of agents) await a.cleanup();
  await t.close();
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

describe("backend bundles through the coordinator", () => {
  it("bad input is a typed error naming the field, and nothing is sent", async () => {
    const cases: [Promise<unknown>, Code, string][] = [
      [t.admin.installBackendBundle({ backend: "sim-bundle" }), Code.InvalidArgument, "node_id: name exactly one target"],
      [t.admin.installBackendBundle({ backend: "sim-bundle", nodeId: "node-a", allNodes: true }), Code.InvalidArgument, "node_id: name exactly one target"],
      [t.admin.installBackendBundle({ backend: "", allNodes: true }), Code.InvalidArgument, "backend"],
      [t.admin.installBackendBundle({ backend: "nope", allNodes: true }), Code.InvalidArgument, 'backend: no registered node has "nope" in its catalog'],
      [t.admin.installBackendBundle({ backend: "sim-bundle", nodeId: "node-z" }), Code.NotFound, 'node_id: node "node-z" is not registered'],
      [t.admin.installBackendBundle({ backend: "sim-bundle", allNodes: true, timeoutMs: 2n ** 63n }), Code.InvalidArgument, "timeout_ms"],
      [t.admin.removeBackendBundle({ backend: "sim-bundle", selector: Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${String(i)}`, "v"])) }), Code.InvalidArgument, "selector: at most 32"],
      [t.admin.listBackendBundles({ timeoutMs: 60_001n }), Code.InvalidArgument, "timeout_ms"],
      [t.admin.listBackendBundles({ nodeId: "bad id!" }), Code.InvalidArgument, "node_id"],
    ];
    for (const [p, code, text] of cases) {
      const e = await failure(p);
      expect([e.code, e.message], text).toEqual([code, expect.stringContaining(text)]);
    }
    // A catalog entry that is not a bundle: the node says so in its result.
    const r = await t.admin.installBackendBundle({ backend: "backend-sim", nodeId: "node-a" });
    expect(r.results.map((x) => [x.nodeId, x.code])).toEqual([["node-a", Code.InvalidArgument]]);
    expect(r.results[0]?.error).toContain("is not a bundle entry of this agent's catalog");
    expect([await installedOn("node-a"), await installedOn("node-b"), eventsOf("backend.installed")]).toEqual([[], [], []]);
  }, 60_000);

  it("warden backends install --all installs on every node, audited once per node; ls shows it", async () => {
    const before = await warden(["backends", "ls", "--json"]);
    expect(before.code, before.stderr).toBe(0);
    const listed = JSON.parse(before.stdout) as { nodes: { nodeId: string; bundles: { backend: string; installed: boolean; sha256: string }[]; error: string }[] };
    expect(listed.nodes.map((n) => [n.nodeId, n.error, n.bundles.map((b) => [b.backend, b.installed, b.sha256])])).toEqual([
      ["node-a", "", [["sim-bundle", false, sha]]],
      ["node-b", "", [["sim-bundle", false, sha]]],
    ]);
    const inst = await warden(["backends", "install", "sim-bundle", "--all"]);
    expect(inst.code, inst.stderr).toBe(0);
    expect(inst.stdout).toContain(`node-a: sim-bundle installed (sha256 ${sha.slice(0, 12)})`);
    expect(inst.stdout).toContain("node-b: sim-bundle installed");
    expect([await installedOn("node-a"), await installedOn("node-b")]).toEqual([[sha], [sha]]);
    const audited = eventsOf("backend.installed");
    expect(audited.map((e) => [e.nodeId, e.payload.case === "backendInstalled" ? [e.payload.value.backend, e.payload.value.sha256] : []]).sort()).toEqual([
      ["node-a", ["sim-bundle", sha]],
      ["node-b", ["sim-bundle", sha]],
    ]);
    expect(audited.every((e) => e.actor.startsWith("unauthenticated"))).toBe(true);
    // Again: nothing pulled, nothing audited.
    const again = await warden(["backends", "install", "sim-bundle", "--node", "node-b"]);
    expect([again.code, again.stdout.trim()]).toEqual([0, "node-b: sim-bundle was already installed (sha256 " + sha.slice(0, 12) + ")"]);
    expect(eventsOf("backend.installed")).toHaveLength(2);
    const ls = await warden(["backends", "ls", "--node", "node-a"]);
    expect(ls.stdout).toMatch(/node-a[\s│]+sim-bundle[\s│]+yes[\s│]+0[\s│]+/);
    expect(ls.stdout).not.toContain("node-b");
    const usage = await warden(["backends", "install", "sim-bundle"]);
    expect([usage.code, usage.stderr]).toEqual([2, expect.stringContaining("--node")]);
  }, 120_000);

  it("a remove while an instance uses the backend is refused, naming it, and nothing is removed anywhere", async () => {
    const loaded = await t.admin.loadModel({ model: "bm" }, { timeoutMs: 120_000 });
    const inc = loaded.instance?.incarnation ?? "";
    expect(loaded.instance?.nodeId).toBe("node-a");
    const e = await failure(t.admin.removeBackendBundle({ backend: "sim-bundle", allNodes: true }));
    expect([e.code, e.message]).toEqual([Code.FailedPrecondition, expect.stringContaining(`in use by instance ${inc} of model "bm"`)]);
    const cli = await warden(["backends", "remove", "sim-bundle", "--all"]);
    expect([cli.code, cli.stderr]).toEqual([7, expect.stringContaining(`instance ${inc}`)]);
    expect([await installedOn("node-a"), await installedOn("node-b")]).toEqual([[sha], [sha]]);
    expect(eventsOf("backend.removed")).toEqual([]);
    expect((await t.admin.listModels({})).instances.find((i) => i.incarnation === inc)?.state).toBe(InstanceState.READY);
    // node-b holds no instance of it: removing there alone is allowed.
    const r = await t.admin.removeBackendBundle({ backend: "sim-bundle", nodeId: "node-b" });
    expect(r.results.map((x) => [x.nodeId, x.removed, x.error])).toEqual([["node-b", true, ""]]);
    expect([await installedOn("node-a"), await installedOn("node-b")]).toEqual([[sha], []]);
    const removed = eventsOf("backend.removed");
    expect(removed.map((x) => [x.nodeId, x.payload.case === "backendRemoved" ? x.payload.value.sha256 : ""])).toEqual([["node-b", sha]]);
    await t.admin.unloadModel({ model: "bm" });
    const gone = await warden(["backends", "remove", "sim-bundle", "--node", "node-a"]);
    expect([gone.code, gone.stdout.trim()]).toEqual([0, "node-a: sim-bundle removed"]);
    expect(await installedOn("node-a")).toEqual([]);
  }, 180_000);

  it("a node that cannot answer is listed with why, never left out (exit 8)", async () => {
    const b = agents[1];
    if (b === undefined) throw new Error("no agent");
    await b.kill();
    await until("node-b not ready", () => t.c.nodes.get("node-b")?.state !== "ready", 60_000);
    const r = await t.admin.listBackendBundles({});
    expect(r.nodes.map((n) => [n.nodeId, n.code, n.bundles.length])).toEqual([
      ["node-a", 0, 1],
      ["node-b", Code.Unavailable, 0],
    ]);
    expect(r.nodes[1]?.error).toMatch(/node "node-b" is (unreachable|lost): its agent was not asked/);
    const ls = await warden(["backends", "ls"]);
    expect(ls.code).toBe(8);
    expect(ls.stdout).toMatch(/node-b[\s│]+-[\s│]+-[\s│]+-[\s│]+-[\s│]+no answer: node "node-b" is/);
    const inst = await t.admin.installBackendBundle({ backend: "sim-bundle", allNodes: true });
    expect(inst.results.map((x) => [x.nodeId, x.code])).toEqual([
      ["node-a", 0],
      ["node-b", Code.Unavailable],
    ]);
  }, 120_000);
  it("the agent keeps a newer leader epoch of a bundle command on disk: an older leader's later command is refused, also after a restart", async () => {
    const [a] = agents;
    if (a === undefined) throw new Error("no agent");
    const client = createClient(AgentService, a.address);
    try {
      expect(await client.installBundle({ backend: "sim-bundle", leaderEpoch: 9n })).toMatchObject({ bundle: { installed: true } });
      const stale = await failure(client.removeBundle({ backend: "sim-bundle", leaderEpoch: 8n }));
      expect([stale.code, stale.message]).toEqual([Code.FailedPrecondition, expect.stringContaining("leader_epoch")]);
      expect(await installedOn("node-a")).toEqual([sha]);
    } finally {
      client.close();
    }
    const bootBefore = t.c.nodes.get("node-a")?.bootEpoch;
    await a.restart();
    const again = createClient(AgentService, a.address);
    try {
      const stale = await failure(again.removeBundle({ backend: "sim-bundle", leaderEpoch: 8n }));
      expect([stale.code, stale.message]).toEqual([Code.FailedPrecondition, expect.stringContaining("leader_epoch")]);
      expect(await installedOn("node-a")).toEqual([sha]);
    } finally {
      again.close();
    }
    // The coordinator's own commands go through the same fence (this one has no HA: epoch 0).
    // Registered again (a new boot epoch), not merely still listed ready from before the restart: the
    // coordinator's commands go over the client of the new registration.
    await until("node-a registered again", () => { const n = t.c.nodes.get("node-a"); return n?.state === "ready" && n.bootEpoch !== bootBefore && n.inventory !== undefined; }, 60_000);
    const r = await t.admin.removeBackendBundle({ backend: "sim-bundle", nodeId: "node-a" });
    expect(r.results.map((x) => [x.nodeId, x.code, x.removed])).toEqual([["node-a", Code.FailedPrecondition, false]]);
    expect(r.results[0]?.error).toContain("leader_epoch");
    expect(await installedOn("node-a")).toEqual([sha]);
  }, 120_000);

});
