/**
 * Upgrading a backend bundle, over real processes: a real coordinator, a real
 * agent whose catalog names a tarball bundle (served by a real HTTP server;
 * its run.sh starts backend-sim with the localai profile) and a model with
 * two replicas. The agent restarts with its catalog naming a second tarball:
 * it registers the new digest, its inventory says each running instance was
 * started from the old one, and the rollout replaces them one at a time. The
 * audit stream shows a replica ready throughout, and both end running from
 * the new bundle's directory.
 */
import { mkdir, readFile, readlink, rm, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventTypeOf } from "@warden/events";
import { InstanceState } from "@warden/proto";
import { tempDir, uniqueTag } from "./support/agent-harness.js";
import { startRemoteAgent, writeAgentConfig, type RemoteAgent } from "./support/agent-process.js";
import { startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { startArtifactServer, sha256Hex, type ArtifactServer } from "./support/artifact-server.js";
import { tarOf } from "./support/oci-registry.js";

const root = resolve(import.meta.dirname, "..");
const simMain = join(root, "services", "cli", "dist", "backend-sim.js");
const fileTag = uniqueTag("bundle-upgrade");
let dir: string;
let models: string;
let server: ArtifactServer;
let t: TestCoordinator;
let agent: RemoteAgent;
const bodies = new Map<string, Buffer>();

/** A LocalAI-style bundle: run.sh starting backend-sim with the arguments it is given (`--addr host:port`). */
function simBundle(version: string): Buffer {
  const runSh = `#!/bin/sh\nexec "${process.execPath}" "${simMain}" "$@"\n`;
  return tarOf([{ name: "run.sh", body: runSh, mode: 0o755 }, { name: "VERSION", body: version }]);
}

const bundleEntry = (version: string): Record<string, unknown> => {
  const body = bodies.get(version) ?? Buffer.alloc(0);
  return { bundle: { source: `${server.url}/sim-${version}.tar.gz`, sha256: sha256Hex(body), sizeBytes: body.length }, env: { WARDEN_AGENT_TEST_TAG: `${fileTag}-up-node` } };
};

/** The bundle directory each live backend of the agent runs from (its cwd under the localai profile). */
async function runningFrom(): Promise<string[]> {
  const out: string[] = [];
  for (const pid of await agent.liveBackends()) out.push(await readlink(`/proc/${String(pid)}/cwd`).catch(() => "gone"));
  return out.sort();
}

const readyInstances = async (): Promise<string[]> => (await t.admin.listModels({})).instances.filter((i) => i.model === "up" && i.state === InstanceState.READY).map((i) => i.incarnation);

beforeAll(async () => {
  dir = await tempDir("warden-bundle-upgrade");
  models = join(dir, "models");
  await mkdir(models);
  await writeFile(join(models, "tiny.gguf"), "GGUF");
  server = await startArtifactServer();
  for (const v of ["v1", "v2"]) {
    bodies.set(v, simBundle(v));
    server.files.set(`/sim-${v}.tar.gz`, bodies.get(v) ?? Buffer.alloc(0));
  }
  t = await startTestCoordinator({
    embeddedAgent: false,
    models: [{ id: "up", backend: "sim-bundle", modelFile: "tiny.gguf", replicas: { min: 2, max: 2 } }],
    policy: { enforcementRetries: 600 },
  });
  agent = await startRemoteAgent({
    coordinator: t.c.address,
    nodeId: "up-node",
    tag: fileTag,
    // room for the rollout's surge: two replicas plus the replacement
    config: { modelsPath: models, maxReplicasPerModel: 3, catalog: { "backend-sim": { builtin: "backend-sim" }, "sim-bundle": bundleEntry("v1") } },
  });
}, 180_000);

afterAll(async () => {
  await agent.cleanup();
  await t.close();
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

describe("upgrading a backend bundle", () => {
  it("an agent restarted with a new bundle: its replicas are replaced one at a time, one ready throughout, all on the new bundle", async () => {
    const v1Dir = join(models, ".warden-cache", "backends", sha256Hex(bodies.get("v1") ?? Buffer.alloc(0)));
    const v2Dir = join(models, ".warden-cache", "backends", sha256Hex(bodies.get("v2") ?? Buffer.alloc(0)));
    const old = await until("two replicas ready on v1", async () => {
      const ready = await readyInstances();
      return ready.length === 2 && (await runningFrom()).join() === [v1Dir, v1Dir].join() ? ready : undefined;
    }, 120_000);
    const from = t.events.length;
    // The documented way: change the catalog and restart the agent (its backends keep running and are adopted).
    const config = JSON.parse(await readFile(agent.configPath, "utf8")) as Record<string, unknown>;
    await writeAgentConfig(agent.configPath, { ...config, catalog: { ...(config["catalog"] as Record<string, unknown>), "sim-bundle": bundleEntry("v2") } });
    await agent.stop();
    await agent.restart();
    let fewestLive = 2;
    await until("both replicas replaced, on v2", async () => {
      const dirs = await runningFrom();
      fewestLive = Math.min(fewestLive, dirs.filter((d) => d !== "gone").length);
      const ready = await readyInstances();
      return ready.length === 2 && !ready.some((i) => old.includes(i)) && dirs.join() === [v2Dir, v2Dir].join();
    }, 180_000);
    await t.waitForEvent("rollout.finished", (e) => e.model === "up", 60_000);
    // The process table never lost both: sampled while it rolled.
    expect(fewestLive).toBeGreaterThanOrEqual(1);
    // The audit stream: walk it counting the model's ready replicas; a stop starts only while another is ready.
    const events = t.events.slice(from).filter((e) => e.model === "up");
    const ready = new Set(old);
    let fewestReady = ready.size;
    for (const e of events) {
      const type = eventTypeOf(e);
      if (type === "backend.loaded") ready.add(e.incarnation);
      else if (type === "eviction.started" || type === "backend.exited") ready.delete(e.incarnation);
      fewestReady = Math.min(fewestReady, ready.size);
    }
    expect(fewestReady).toBeGreaterThanOrEqual(1);
    expect(events.filter((e) => eventTypeOf(e) === "replica.scaled-up").length).toBe(2);
    expect(events.filter((e) => eventTypeOf(e) === "eviction.stopped").map((e) => e.incarnation).sort()).toEqual([...old].sort());
  }, 300_000);
});
