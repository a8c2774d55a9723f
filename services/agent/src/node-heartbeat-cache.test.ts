import { describe, expect, it } from "vitest";
import { ManualClock, seededRng } from "@warden/common";
import { create } from "@bufbuild/protobuf";
import { HeartbeatRequestSchema, type HeartbeatRequest } from "@warden/proto";
import { createNodeHeartbeat, type ArtifactCacheSnapshot, type HeartbeatSource, type NodeServicePort } from "./node-heartbeat.js";

const flush = async (): Promise<void> => {
  for (let i = 0; i < 10; i++) await new Promise((r) => setImmediate(r));
};

describe("node heartbeat: the artifact cache", () => {
  it("sends free and evictable bytes every beat, the digest set only when it changed, after full_inventory_required and with full inventories", async () => {
    const clock = new ManualClock();
    const cache = { version: 1, digests: ["a".repeat(64)] };
    const source: HeartbeatSource = {
      bootEpochMs: 1_700_000_000_000,
      inventory: async () => ({ backends: [], orphans: [], foreign: [], bootEpochMs: 1_700_000_000_000, leaderEpoch: 0n }),
      nodeResources: async () => ({ gpus: [], ramTotalBytes: 1000n, ramUsedBytes: 10n }),
      artifactCache: async (): Promise<ArtifactCacheSnapshot> => ({ freeBytes: 500, evictableBytes: 70, digestsVersion: cache.version, digests: () => cache.digests }),
    };
    const beats: HeartbeatRequest[] = [];
    let fullNext = false;
    const node: NodeServicePort = {
      register: async () => ({ coordinatorEpoch: 1n, heartbeatIntervalMs: 0 }),
      heartbeat: async (req) => {
        beats.push(create(HeartbeatRequestSchema, req));
        const fullInventoryRequired = fullNext;
        fullNext = false;
        return { registerRequired: false, coordinatorEpoch: 1n, fullInventoryRequired };
      },
    };
    const hb = createNodeHeartbeat({ nodeId: "n1", address: "a:1", labels: {}, backends: ["sim"], source, node, intervalMs: 1_000, fullInventoryEveryMs: 60_000, clock, rng: seededRng(1) });
    hb.start();
    const step = async (): Promise<void> => {
      clock.advance(1_000);
      await flush();
    };
    await flush();
    await step();
    await step();
    cache.version = 2;
    cache.digests = ["a".repeat(64), "b".repeat(64)];
    await step();
    await step();
    fullNext = true;
    await step();
    await step();
    await step();
    await hb.stop();
    const sent = beats.map((b) => b.artifactCache?.digests?.sha256.map((d) => Buffer.from(d).toString("hex")[0]).join("") ?? "-");
    // 1 full (set), 2 unchanged, 3 changed, 4 unchanged, 5 answered full-required, 6 full again (set), 7 unchanged.
    expect(sent).toEqual(["a", "-", "ab", "-", "-", "ab", "-"]);
    expect(beats.every((b) => b.artifactCache?.freeBytes === 500n && b.artifactCache.evictableBytes === 70n)).toBe(true);
  });

  it("sends the bundle states only when they changed, after full_inventory_required and with full inventories; an unknown size as size_known false", async () => {
    const clock = new ManualClock();
    const b = { version: 1, states: [{ backend: "llama", installed: false, pullBytes: 1024 as number | undefined }, { backend: "img", installed: false, pullBytes: undefined as number | undefined }] };
    const source: HeartbeatSource = {
      bootEpochMs: 1_700_000_000_000,
      inventory: async () => ({ backends: [], orphans: [], foreign: [], bootEpochMs: 1_700_000_000_000, leaderEpoch: 0n }),
      nodeResources: async () => ({ gpus: [], ramTotalBytes: 1000n, ramUsedBytes: 10n }),
      artifactCache: async (): Promise<ArtifactCacheSnapshot> => ({ freeBytes: 500, evictableBytes: 70, digestsVersion: 1, digests: () => [], bundlesVersion: b.version, bundles: () => b.states }),
    };
    const beats: HeartbeatRequest[] = [];
    let fullNext = false;
    const node: NodeServicePort = {
      register: async () => ({ coordinatorEpoch: 1n, heartbeatIntervalMs: 0 }),
      heartbeat: async (req) => {
        beats.push(create(HeartbeatRequestSchema, req));
        const fullInventoryRequired = fullNext;
        fullNext = false;
        return { registerRequired: false, coordinatorEpoch: 1n, fullInventoryRequired };
      },
    };
    const hb = createNodeHeartbeat({ nodeId: "n1", address: "a:1", labels: {}, backends: ["llama", "img"], source, node, intervalMs: 1_000, fullInventoryEveryMs: 60_000, clock, rng: seededRng(1) });
    hb.start();
    const step = async (): Promise<void> => {
      clock.advance(1_000);
      await flush();
    };
    await flush();
    await step();
    await step();
    b.version = 2;
    b.states = [{ backend: "llama", installed: true, pullBytes: 0 }, { backend: "img", installed: false, pullBytes: 2048 }];
    await step();
    await step();
    fullNext = true;
    await step();
    await step();
    await step();
    await hb.stop();
    const sent = beats.map((x) => x.artifactCache?.bundles?.states.map((s) => `${s.backend}:${s.installed ? "in" : s.sizeKnown ? String(s.pullBytes) : "?"}`).join(",") ?? "-");
    // 1 full (list), 2 unchanged, 3 changed, 4 unchanged, 5 answered full-required, 6 full again (list), 7 unchanged.
    expect(sent).toEqual(["llama:1024,img:?", "-", "llama:in,img:2048", "-", "-", "llama:in,img:2048", "-"]);
  });
});
