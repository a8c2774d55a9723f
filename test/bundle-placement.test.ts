/**
 * Placement counts a backend bundle's size, through real processes: a
 * coordinator and three remote agents whose catalog names the same bundle
 * (a 2 MB tarball): "a-roomy" has room and lacks it, "a-small" has a disk
 * budget too small for it, "b-installed" holds it installed. The agents'
 * heartbeats carry each bundle's state; ExplainPlacement rules out the small
 * node saying the bundle is what it cannot pull, names the pull on the roomy
 * one, and picks the node with the bundle installed although the roomy one
 * would win the tie by its id.
 */
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, NodeState, PlacementDecision } from "@warden/proto";
import { simModel, until } from "./support/coordinator-harness.js";
import { simCatalog, uniqueTag } from "./support/agent-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { freePort } from "./support/free-port.js";

const bundleSha = "5".repeat(64);
const bundleBytes = 2_000_000;
let dir = "";
let coord: CoordinatorProcess | undefined;
const agents: RemoteAgent[] = [];
let admin: Client<typeof AdminService>;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-bundle-placement-"));
  coord = await startCoordinatorProcess(join(dir, "coord.yaml"), {
    listen: `127.0.0.1:${String(await freePort())}`,
    httpListen: "127.0.0.1:0",
    stateDir: join(dir, "coord-state"),
    embeddedAgent: false,
    recoveryWindow: "200ms",
    models: [{ ...simModel("m"), backend: "bundled" }],
  });
  const tag = uniqueTag("bundle-placement");
  // "a-roomy" sorts first: without the bundle counted it would win every tie (empty nodes score alike).
  for (const [nodeId, budget, installed] of [["a-roomy", undefined, false], ["a-small", 1_000_000, false], ["b-installed", undefined, true]] as const) {
    const modelsPath = join(dir, nodeId, "models");
    await mkdir(modelsPath, { recursive: true });
    if (installed) {
      // Installed as BundleInstaller leaves it: a directory named by the digest holding run.sh (never run here).
      const bundleDir = join(modelsPath, ".warden-cache", "backends", bundleSha);
      await mkdir(bundleDir, { recursive: true });
      await writeFile(join(bundleDir, "run.sh"), "#!/bin/sh\nexit 1\n", { mode: 0o755 });
    }
    const catalog = { "backend-sim": simCatalog(`${tag}-${nodeId}`), bundled: { bundle: { source: "https://bundles.invalid/bundled.tar", sha256: bundleSha, sizeBytes: bundleBytes } } };
    agents.push(await startRemoteAgent({ coordinator: coord.address, nodeId, tag, config: { modelsPath, catalog, ...(budget === undefined ? {} : { artifactCacheBudget: budget }) } }));
  }
  admin = createClient(AdminService, coord.address);
  await until("three nodes ready", async () => (await admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 3, 60_000);
}, 180_000);

afterAll(async () => {
  admin.close();
  for (const a of agents) await a.cleanup();
  await coord?.kill();
  await rm(dir, { recursive: true, force: true });
}, 60_000);

describe("placement counts the backend bundle", { timeout: 120_000 }, () => {
  it("rules out the node whose cache cannot hold the bundle, names the pull, and prefers the node with it installed", async () => {
    // Every node's first full heartbeat (its inventory, with its cache and bundles in the same report).
    const r = await until("every node reported", async () => {
      const x = await admin.explainPlacement({ model: "m" });
      return x.nodes.length === 3 && x.nodes.every((n) => !n.reason.includes("has not reported")) ? x : undefined;
    }, 60_000);
    const reasons = Object.fromEntries(r.nodes.map((n) => [n.nodeId, n.reason]));
    expect(reasons["a-small"]).toBe("no disk room for its backend bundle: pull 1.9 MiB (bundle 1.9 MiB), the artifact cache can make 976.6 KiB");
    expect(reasons["a-roomy"]).toMatch(/^fits .*; pull 1\.9 MiB \(bundle 1\.9 MiB\)\)$/);
    expect(reasons["b-installed"]).toMatch(/^fits .*; bundle cached\)$/);
    expect([r.decision, r.nodeId]).toEqual([PlacementDecision.PLACE, "b-installed"]);
  });
});
