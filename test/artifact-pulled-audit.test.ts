/**
 * Completed pulls and start-driven bundle installs reach the coordinator's
 * audit stream, once each: two real agent processes (zones a and b) pull from
 * a real HTTP origin for loads through a real coordinator. A model's file
 * pulled on node-a is audited as `artifact.pulled` from the origin; the same
 * file on node-b, fetched from node-a, as from peer node-a; a pull the origin
 * cut mid-file and a later load resumed says how many bytes it kept and how
 * many the origin sent then. A start whose backend is a bundle (a tarball
 * whose run.sh starts backend-sim) installs it, audited as
 * `backend.installed` naming the start, and its tarball's pull as a bundle
 * layer; an operator's install of it afterwards is answered as already
 * installed and audited no second time. A heartbeat's pulls and installs
 * are bounded and checked (a bad one refuses the whole report, naming the
 * field), and one re-sent after a lost answer is audited once.
 */
import { mkdir, rm, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventTypeOf } from "@warden/events";
import { Code, WardenError } from "@warden/common";
import { createClient } from "@warden/grpc";
import { NodeService, type Event } from "@warden/proto";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { tempDir, uniqueTag } from "./support/agent-harness.js";
import { bytesOf, sha256Hex, startArtifactServer, type ArtifactServer } from "./support/artifact-server.js";
import { tarOf } from "./support/oci-registry.js";

const root = resolve(import.meta.dirname, "..");
const simMain = join(root, "services", "cli", "dist", "backend-sim.js");
const fileTag = uniqueTag("pulled-audit");
const fileBytes = 3_000_000;
const weights = bytesOf(fileBytes, 51);
const resumable = bytesOf(fileBytes, 52);
const sha = sha256Hex(weights);
const shaResumed = sha256Hex(resumable);
/** A LocalAI-style bundle: run.sh starting backend-sim with the arguments it is given. */
const bundle = tarOf([{ name: "run.sh", body: `#!/bin/sh\nexec "${process.execPath}" "${simMain}" "$@"\n`, mode: 0o755 }]);
const bundleSha = sha256Hex(bundle);
let dir: string;
let origin: ArtifactServer;
let t: TestCoordinator;
const agents: RemoteAgent[] = [];

function pinned(id: string, zone: string, file: { name: string; sha: string }): Record<string, unknown> {
  return { ...simModel(id, { selector: { zone } }), modelFile: file.name, artifacts: [{ source: `${origin.url}/${file.name}`, sha256: file.sha, sizeBytes: fileBytes, path: file.name }] };
}

const pulled = (): Event[] => t.events.filter((e) => eventTypeOf(e) === "artifact.pulled");
const pullOf = (e: Event | undefined): Record<string, unknown> => {
  if (e?.payload.case !== "artifactPulled") return {};
  const v = e.payload.value;
  return { nodeId: e.nodeId, model: e.model, actor: e.actor, sha256: v.sha256, sizeBytes: v.sizeBytes, path: v.path, backend: v.backend, bundleLayer: v.bundleLayer, origin: v.origin, sources: v.sources.map((s) => [s.peerNodeId, s.bytes]), resumedBytes: v.resumedBytes };
};

/** Waits for `n` more heartbeats of `nodeId` (250 ms apart): what a re-sent record would ride on. */
async function beats(nodeId: string, n: number): Promise<void> {
  const at = t.c.nodes.get(nodeId)?.lastHeartbeatMs ?? 0;
  await until(`${String(n)} more heartbeats of ${nodeId}`, () => (t.c.nodes.get(nodeId)?.lastHeartbeatMs ?? 0) > at + 250 * (n - 0.4), 30_000);
}

beforeAll(async () => {
  dir = await tempDir("warden-pulled-audit");
  origin = await startArtifactServer();
  origin.files.set("/weights.bin", weights);
  origin.files.set("/resumable.bin", resumable);
  origin.files.set("/sim.tar", bundle);
  t = await startTestCoordinator({
    embeddedAgent: false,
    models: [
      pinned("on-a", "a", { name: "weights.bin", sha }),
      pinned("on-b", "b", { name: "weights.bin", sha }),
      // Never loaded: its ExplainPlacement says whether node-a holds the file.
      { ...pinned("either", "a", { name: "weights.bin", sha }), selector: {} },
      pinned("resumed-on-a", "a", { name: "resumable.bin", sha: shaResumed }),
      { id: "bundled", backend: "sim-bundle", modelFile: "tiny.gguf", selector: { zone: "b" } },
    ],
    policy: { enforcementRetries: 600 },
  });
  for (const [nodeId, zone] of [["node-a", "a"], ["node-b", "b"]] as const) {
    const modelsPath = join(dir, nodeId);
    await mkdir(modelsPath);
    await writeFile(join(modelsPath, "tiny.gguf"), "GGUF");
    agents.push(
      await startRemoteAgent({
        coordinator: t.c.address,
        nodeId,
        tag: fileTag,
        labels: { zone },
        config: {
          modelsPath,
          catalog: {
            "backend-sim": { builtin: "backend-sim" },
            "sim-bundle": { bundle: { source: `${origin.url}/sim.tar`, sha256: bundleSha, sizeBytes: bundle.length }, env: { WARDEN_AGENT_TEST_TAG: `${fileTag}-${nodeId}` } },
          },
        },
      }),
    );
  }
  await until("both agents registered", () => ["node-a", "node-b"].every((n) => t.c.nodes.get(n)?.state === "ready" && t.c.nodes.get(n)?.inventory !== undefined), 60_000);
}, 180_000);

afterAll(async () => {
  for (const i of (await t.admin.listModels({})).instances) await t.admin.unloadModel({ model: i.model }).catch(() => undefined);
  for (const a of agents) await a.cleanup();
  await t.close();
  await origin.close();
  await rm(dir, { recursive: true, force: true });
});

describe("artifact.pulled and start-driven backend.installed", { timeout: 240_000 }, () => {
  it("a pull from the origin and one from a peer are each audited once, naming the node, the model and where the bytes came from", async () => {
    expect((await t.admin.loadModel({ model: "on-a" }, { timeoutMs: 120_000 })).instance?.nodeId).toBe("node-a");
    await until("node-a's pull audited", () => pulled().some((e) => e.nodeId === "node-a"), 30_000);
    const common = { sha256: sha, sizeBytes: BigInt(fileBytes), path: "weights.bin", backend: "", bundleLayer: false, origin: `${origin.url}/weights.bin`, resumedBytes: 0n, actor: "" };
    expect(pullOf(pulled().find((e) => e.nodeId === "node-a"))).toEqual({ ...common, nodeId: "node-a", model: "on-a", sources: [["", BigInt(fileBytes)]] });

    await until("node-a reported the digest", async () => (await t.admin.explainPlacement({ model: "either" })).nodes.find((n) => n.nodeId === "node-a")?.reason.endsWith("; cached)") === true, 60_000);
    const sent = origin.bytesSent;
    expect((await t.admin.loadModel({ model: "on-b" }, { timeoutMs: 120_000 })).instance?.nodeId).toBe("node-b");
    expect(origin.bytesSent - sent).toBe(0);
    await until("node-b's pull audited", () => pulled().some((e) => e.nodeId === "node-b"), 30_000);
    expect(pullOf(pulled().find((e) => e.nodeId === "node-b"))).toEqual({ ...common, nodeId: "node-b", model: "on-b", sources: [["node-a", BigInt(fileBytes)]] });

    // Later heartbeats carry them no more: still one event per pull.
    await Promise.all([beats("node-a", 4), beats("node-b", 4)]);
    expect(pulled().map((e) => e.nodeId).sort()).toEqual(["node-a", "node-b"]);
  });

  it("a pull the origin cut mid-file, resumed by a later load, says the bytes it kept and the origin's", async () => {
    origin.dropAfterBytes = 1_000_000;
    await t.admin.loadModel({ model: "resumed-on-a" }, { timeoutMs: 20_000 }).catch(() => undefined);
    origin.dropAfterBytes = undefined;
    const loaded = async (): Promise<boolean> => (await t.admin.listModels({})).instances.some((i) => i.model === "resumed-on-a");
    // After the failure's cooldown (the load's backoff) a load succeeds.
    await until("resumed-on-a loaded", async () => (await loaded()) || (await t.admin.loadModel({ model: "resumed-on-a" }, { timeoutMs: 60_000 }).then(() => true, () => new Promise<false>((r) => setTimeout(() => { r(false); }, 500)))), 90_000);
    await until("the resumed pull audited", () => pulled().some((e) => pullOf(e)["sha256"] === shaResumed), 30_000);
    await beats("node-a", 4);
    const mine = pulled().filter((e) => pullOf(e)["sha256"] === shaResumed);
    expect(mine).toHaveLength(1);
    const p = pullOf(mine[0]);
    const kept = p["resumedBytes"] as bigint;
    // The cut response sent 1 MB, then the socket was destroyed: what reached the partial before the
    // reset is some of that, never more (bytes still in flight are lost), and never the whole file.
    expect(kept > 0n && kept <= 1_000_000n).toBe(true);
    expect(p["sources"]).toEqual([["", BigInt(fileBytes) - kept]]);
    expect([p["nodeId"], p["model"]]).toEqual(["node-a", "resumed-on-a"]);
  });

  it("a start that installs its backend's bundle is audited as backend.installed naming the start; an operator's install after it is not audited again", async () => {
    const installed = (): Event[] => t.events.filter((e) => eventTypeOf(e) === "backend.installed");
    expect(installed()).toEqual([]);
    const inc = (await t.admin.loadModel({ model: "bundled" }, { timeoutMs: 120_000 })).instance;
    expect(inc?.nodeId).toBe("node-b");
    await until("the start's install audited", () => installed().length > 0, 30_000);
    const ev = installed()[0];
    expect(ev?.payload.case === "backendInstalled" ? [ev.nodeId, ev.model, ev.actor, ev.payload.value.backend, ev.payload.value.sha256, ev.payload.value.source, ev.payload.value.startIncarnation] : []).toEqual(["node-b", "bundled", "", "sim-bundle", bundleSha, `${origin.url}/sim.tar`, inc?.incarnation]);
    // The tarball's pull, as a layer of the bundle.
    const layer = pulled().filter((e) => pullOf(e)["sha256"] === bundleSha);
    expect(layer.map(pullOf)).toEqual([{ nodeId: "node-b", model: "bundled", actor: "", sha256: bundleSha, sizeBytes: BigInt(bundle.length), path: "bundle.tar", backend: "sim-bundle", bundleLayer: true, origin: `${origin.url}/sim.tar`, sources: [["", BigInt(bundle.length)]], resumedBytes: 0n }]);

    const r = await t.admin.installBackendBundle({ backend: "sim-bundle", nodeId: "node-b" }, { timeoutMs: 60_000 });
    expect(r.results.map((x) => [x.nodeId, x.alreadyInstalled, x.error])).toEqual([["node-b", true, ""]]);
    await beats("node-b", 4);
    expect(installed()).toHaveLength(1);
  });

  it("a heartbeat's pulls and installs are bounded and checked (a bad one refuses the whole report, naming the field); a re-sent one is audited once", async () => {
    const node = createClient(NodeService, t.c.address);
    const on = (type: string): Event[] => t.events.filter((e) => eventTypeOf(e) === type && e.nodeId === "fake-node");
    try {
      const bootEpoch = 7n;
      await node.register({ nodeId: "fake-node", address: "127.0.0.1:1", bootEpoch, version: "" });
      type Pull = { id: bigint; sha256: Uint8Array; sizeBytes: bigint; path: string; model: string; origin: string; sources: { peerNodeId: string; bytes: bigint }[] };
      type Install = { id: bigint; backend: string; sha256: Uint8Array; source: string; model: string; incarnation: string };
      const beat = (sequence: bigint, pulls: Pull[], bundleInstalls: Install[] = []): Promise<unknown> =>
        node.heartbeat({ nodeId: "fake-node", bootEpoch, sequence, backends: [], artifactCache: { freeBytes: 1n, evictableBytes: 0n, pulls, bundleInstalls } });
      const ok: Pull = { id: 1n, sha256: new Uint8Array(32).fill(1), sizeBytes: 10n, path: "m.bin", model: "m", origin: "https://example.invalid/m.bin", sources: [{ peerNodeId: "", bytes: 10n }] };
      const inst: Install = { id: 1n, backend: "sim-bundle", sha256: new Uint8Array(32).fill(3), source: "https://example.invalid/b.tar", model: "m", incarnation: "01JAAAAAAAAAAAAAAAAAAAAAAA" };
      const cases: [Pull[], Install[], string][] = [
        [[{ ...ok, sha256: new Uint8Array(3) }], [], "artifact_cache.pulls[0].sha256"],
        [[{ ...ok, path: "p".repeat(257) }], [], "artifact_cache.pulls[0].path"],
        [[{ ...ok, model: "-bad" }], [], "artifact_cache.pulls[0].model"],
        [[{ ...ok, sources: Array.from({ length: 10 }, () => ({ peerNodeId: "", bytes: 1n })) }], [], "artifact_cache.pulls[0].sources"],
        [[{ ...ok, sources: [{ peerNodeId: "a b", bytes: 1n }] }], [], "artifact_cache.pulls[0].sources[0].peer_node_id"],
        [Array.from({ length: 33 }, (_, i) => ({ ...ok, id: BigInt(i + 1) })), [], "artifact_cache.pulls"],
        [[], [{ ...inst, backend: "" }], "artifact_cache.bundle_installs[0].backend"],
        [[], Array.from({ length: 17 }, (_, i) => ({ ...inst, id: BigInt(i + 1) })), "artifact_cache.bundle_installs"],
      ];
      for (const [pulls, installs, field] of cases) {
        const e: unknown = await beat(1n, pulls, installs).then(() => undefined, (x: unknown) => x);
        expect(e, field).toBeInstanceOf(WardenError);
        expect([(e as WardenError).code, (e as WardenError).message], field).toEqual([Code.InvalidArgument, expect.stringContaining(field)]);
      }
      expect([on("artifact.pulled"), on("backend.installed")]).toEqual([[], []]);
      // The answer to the first was lost (say): the agent sends it again with the next one.
      await beat(1n, [ok], [inst]);
      await beat(2n, [ok, { ...ok, id: 2n, sha256: new Uint8Array(32).fill(2) }], [inst]);
      await until("three events", () => on("artifact.pulled").length + on("backend.installed").length >= 3);
      expect(on("artifact.pulled").map((e) => (e.payload.case === "artifactPulled" ? e.payload.value.sha256 : ""))).toEqual(["01".repeat(32), "02".repeat(32)]);
      expect(on("backend.installed").map((e) => (e.payload.case === "backendInstalled" ? [e.model, e.payload.value.startIncarnation] : []))).toEqual([["m", inst.incarnation]]);
    } finally {
      node.close();
    }
  });
});
