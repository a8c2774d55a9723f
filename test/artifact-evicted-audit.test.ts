/**
 * Cache evictions reach the coordinator's audit stream: a real agent process
 * with a 3.5 MB cache budget (room for two of the 1.5 MB files, not three)
 * pulls from a real HTTP server for loads through a real coordinator; the
 * third model's pull evicts the least recently used file, and the
 * coordinator audits it once as `artifact.evicted` naming the node, the
 * digest, its size and why.
 */
import { mkdir, readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventTypeOf } from "@warden/events";
import { Code, WardenError } from "@warden/common";
import { createClient } from "@warden/grpc";
import { NodeService } from "@warden/proto";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { tempDir, uniqueTag } from "./support/agent-harness.js";
import { bytesOf, sha256Hex, startArtifactServer, type ArtifactServer } from "./support/artifact-server.js";

const fileTag = uniqueTag("evicted-audit");
const fileBytes = 1_500_000;
let dir: string;
let models: string;
let server: ArtifactServer;
let t: TestCoordinator;
let agent: RemoteAgent;
const sha = new Map<string, string>();

beforeAll(async () => {
  dir = await tempDir("warden-evicted-audit");
  models = join(dir, "models");
  await mkdir(models);
  server = await startArtifactServer();
  const specs = [];
  for (const [i, id] of ["a", "b", "c"].entries()) {
    const body = bytesOf(fileBytes, i + 1);
    sha.set(id, sha256Hex(body));
    server.files.set(`/${id}.bin`, body);
    specs.push({ ...simModel(id), modelFile: `${id}.bin`, artifacts: [{ source: `${server.url}/${id}.bin`, sha256: sha256Hex(body), sizeBytes: fileBytes, path: `${id}.bin` }] });
  }
  t = await startTestCoordinator({ embeddedAgent: false, models: specs, policy: { enforcementRetries: 600 } });
  agent = await startRemoteAgent({ coordinator: t.c.address, nodeId: "cache-node", tag: fileTag, config: { modelsPath: models, artifactCacheBudget: 3_500_000 } });
  await until("agent registered", () => t.c.nodes.get("cache-node")?.state === "ready" && t.c.nodes.get("cache-node")?.inventory !== undefined);
}, 120_000);

afterAll(async () => {
  for (const i of (await t.admin.listModels({})).instances) await t.admin.unloadModel({ model: i.model }).catch(() => undefined);
  await agent.cleanup();
  await t.close();
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

describe("artifact.evicted", () => {
  it("an eviction on a node is audited once by the coordinator with node, digest, bytes and why", async () => {
    for (const id of ["a", "b"]) {
      await t.admin.loadModel({ model: id }, { timeoutMs: 120_000 });
      await t.admin.unloadModel({ model: id });
    }
    expect(t.events.filter((e) => eventTypeOf(e) === "artifact.evicted")).toEqual([]);
    await t.admin.loadModel({ model: "c" }, { timeoutMs: 120_000 });
    const ev = await t.waitForEvent("artifact.evicted", () => true, 60_000);
    expect(ev.nodeId).toBe("cache-node");
    expect(ev.payload.case === "artifactEvicted" ? [ev.payload.value.sha256, ev.payload.value.sizeBytes, ev.payload.value.reason] : []).toEqual([
      sha.get("a"),
      BigInt(fileBytes),
      `least recently used; room for ${sha.get("c") ?? ""}`,
    ]);
    expect((await readdir(join(models, ".warden-cache", "sha256"))).sort()).toEqual([sha.get("b"), sha.get("c")].sort());
    // Later heartbeats carry it no more: still one event after several more beats (250 ms apart).
    const beats = t.c.nodes.get("cache-node")?.lastHeartbeatMs ?? 0;
    await until("four more heartbeats", () => (t.c.nodes.get("cache-node")?.lastHeartbeatMs ?? 0) > beats + 900, 30_000);
    expect(t.events.filter((e) => eventTypeOf(e) === "artifact.evicted")).toHaveLength(1);
  }, 240_000);

  it("a heartbeat's evictions are bounded and checked (a bad one refuses the whole report, naming the field); a re-sent one is audited once", async () => {
    const node = createClient(NodeService, t.c.address);
    const evictedOn = (nodeId: string): number => t.events.filter((e) => eventTypeOf(e) === "artifact.evicted" && e.nodeId === nodeId).length;
    try {
      const bootEpoch = 7n;
      await node.register({ nodeId: "fake-node", address: "127.0.0.1:1", bootEpoch, version: "" });
      const beat = (sequence: bigint, evictions: { id: bigint; sha256: Uint8Array; sizeBytes: bigint; reason: string }[]): Promise<unknown> =>
        node.heartbeat({ nodeId: "fake-node", bootEpoch, sequence, backends: [], artifactCache: { freeBytes: 1n, evictableBytes: 0n, evictions } });
      const ok = { id: 1n, sha256: new Uint8Array(32).fill(1), sizeBytes: 10n, reason: "least recently used; room for x" };
      const cases: [typeof ok[], string][] = [
        [[{ ...ok, sha256: new Uint8Array(3) }], "artifact_cache.evictions[0].sha256"],
        [[{ ...ok, reason: "r".repeat(257) }], "artifact_cache.evictions[0].reason"],
        [Array.from({ length: 65 }, (_, i) => ({ ...ok, id: BigInt(i + 1) })), "artifact_cache.evictions"],
      ];
      for (const [evictions, field] of cases) {
        const e: unknown = await beat(1n, evictions).then(() => undefined, (x: unknown) => x);
        expect(e).toBeInstanceOf(WardenError);
        expect([(e as WardenError).code, (e as WardenError).message], field).toEqual([Code.InvalidArgument, expect.stringContaining(field)]);
      }
      expect(evictedOn("fake-node")).toBe(0);
      // The answer to the first was lost (say): the agent sends it again with the next one.
      await beat(1n, [ok]);
      await beat(2n, [ok, { ...ok, id: 2n, sha256: new Uint8Array(32).fill(2) }]);
      await until("two events", () => evictedOn("fake-node") >= 2);
      expect(t.events.filter((e) => eventTypeOf(e) === "artifact.evicted" && e.nodeId === "fake-node").map((e) => (e.payload.case === "artifactEvicted" ? e.payload.value.sha256 : ""))).toEqual(["01".repeat(32), "02".repeat(32)]);
    } finally {
      node.close();
    }
  }, 60_000);
});
