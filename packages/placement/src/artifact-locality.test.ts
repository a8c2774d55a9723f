import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { diskRoomBytes, formatBytes, planPlacement, pullBytesOf, pullNeedOf, type BundleFact, type NodeCandidate } from "./index.js";
import { GiB, node } from "./node-candidate.fixture.js";

const a = "a".repeat(64);
const b = "b".repeat(64);
const weights = [{ sha256: a, sizeBytes: 4.2 * GiB }];
const req = { model: "m", sizeBytes: 8 * GiB, selector: {}, artifacts: weights };

describe("placement and the artifact cache", () => {
  it("prefers a node that holds the artifacts over a better binpack score, and explains cached / pull per node", () => {
    const nodes = [node({ nodeId: "busy", memoryUsedBytes: 10 * GiB, diskFreeBytes: 100 * GiB, cachedDigests: new Set() }), node({ nodeId: "warm", diskFreeBytes: 100 * GiB, cachedDigests: new Set([a]) })];
    const plan = planPlacement(req, nodes, "binpack");
    expect(plan).toMatchObject({ t: "place", nodeId: "warm" });
    expect(plan.verdicts.map((v) => v.reason)).toEqual([expect.stringMatching(/; pull 4\.2 GiB\)$/), expect.stringMatching(/; cached\)$/)]);
    // Without artifacts binpack decides as before.
    expect(planPlacement({ ...req, artifacts: [] }, nodes, "binpack")).toMatchObject({ t: "place", nodeId: "busy" });
  });

  it("never picks a node whose cache cannot make room for the pull; free plus evictable counts as room", () => {
    const nodes = [node({ nodeId: "full", diskFreeBytes: 1 * GiB, diskEvictableBytes: 2 * GiB }), node({ nodeId: "roomy", diskFreeBytes: 1 * GiB, diskEvictableBytes: 4 * GiB })];
    const plan = planPlacement(req, nodes, "spread");
    expect(plan).toMatchObject({ t: "place", nodeId: "roomy" });
    expect(plan.verdicts[0]?.reason).toBe("no disk room for its artifacts: pull 4.2 GiB, the artifact cache can make 3.0 GiB");
    expect(planPlacement(req, [nodes[0] as NodeCandidate], "spread").t).toBe("no-fit");
  });

  it("a node that reported no cache is not ruled out on disk (an older agent)", () => {
    expect(planPlacement(req, [node({ nodeId: "old" })], "binpack")).toMatchObject({ t: "place", nodeId: "old" });
  });

  it("counts each digest once and skips held ones", () => {
    expect(pullBytesOf([{ sha256: a, sizeBytes: 5 }, { sha256: a, sizeBytes: 5 }, { sha256: b, sizeBytes: 7 }], { cachedDigests: new Set([b]) })).toBe(5);
    expect(formatBytes(512)).toBe("512 B");
    expect(formatBytes(1536 * 1024 ** 2)).toBe("1.5 GiB");
  });

  it("property: the chosen node has room for its pull (artifacts and bundle); no other candidate of its spread tier that fits as well pulls less, or as much with the bundle installed", () => {
    const digests = ["1", "2", "3", "4"].map((c) => c.repeat(64));
    // The backend's bundle on a node: not reported, installed, missing with a known size, missing of unknown size.
    const arbBundle = fc.oneof(
      fc.constant(undefined),
      fc.constant<BundleFact>({ installed: true, pullBytes: undefined }),
      fc.integer({ min: 0, max: 12 }).map((g): BundleFact => ({ installed: false, pullBytes: g * GiB })),
      fc.constant<BundleFact>({ installed: false, pullBytes: undefined }),
    );
    const arbNode = (i: number) =>
      fc.record({ used: fc.integer({ min: 0, max: 24 }), free: fc.option(fc.integer({ min: 0, max: 40 }), { nil: undefined }), evictable: fc.integer({ min: 0, max: 10 }), held: fc.subarray(digests), bundle: arbBundle }).map(
        (r): NodeCandidate =>
          node({ nodeId: `n${String(i)}`, memoryUsedBytes: r.used * GiB, ...(r.free === undefined ? {} : { diskFreeBytes: r.free * GiB, diskEvictableBytes: r.evictable * GiB }), cachedDigests: new Set(r.held), ...(r.bundle === undefined ? {} : { backendBundles: new Map([["llama", r.bundle]]) }) }),
      );
    const arb = fc.record({
      nodes: fc.integer({ min: 1, max: 6 }).chain((k) => fc.tuple(...Array.from({ length: k }, (_, i) => arbNode(i)))),
      need: fc.subarray(digests).chain((ds) => fc.tuple(...ds.map((d) => fc.integer({ min: 1, max: 20 }).map((g) => ({ sha256: d, sizeBytes: g * GiB }))))),
      strategy: fc.constantFrom("binpack" as const, "spread" as const),
    });
    fc.assert(
      fc.property(arb, ({ nodes, need, strategy }) => {
        const plan = planPlacement({ model: "m", sizeBytes: 4 * GiB, selector: {}, backend: "llama", artifacts: need }, nodes, strategy);
        const pullOf = (n: NodeCandidate): number => pullNeedOf(need, "llama", n).bytes;
        if (plan.t === "no-fit") {
          // Only disk or memory can rule these nodes out: none has room for its pull and memory.
          for (const n of nodes) expect(pullOf(n) > diskRoomBytes(n) || n.memoryUsedBytes + 4 * GiB > n.memoryTotalBytes).toBe(true);
          return;
        }
        const chosen = nodes.find((n) => n.nodeId === plan.nodeId) as NodeCandidate;
        expect(pullOf(chosen)).toBeLessThanOrEqual(diskRoomBytes(chosen));
        expect(pullOf(chosen)).toBeGreaterThanOrEqual(pullBytesOf(need, chosen));
        const v = plan.verdicts.find((x) => x.nodeId === plan.nodeId);
        for (const o of plan.verdicts) {
          const sameKind = plan.t === "place" ? o.fits : o.fitsAfterEviction && !plan.verdicts.some((x) => x.fits);
          if (!sameKind || o.spreadTier !== v?.spreadTier) continue;
          expect(o.pullBytes ?? 0).toBeGreaterThanOrEqual(v.pullBytes ?? 0);
          if ((o.pullBytes ?? 0) === (v.pullBytes ?? 0) && v.bundleMissing === true) expect(o.bundleMissing).toBe(true);
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe("placement and the backend's bundle", () => {
  const bundle = (f: BundleFact): ReadonlyMap<string, BundleFact> => new Map([["llama", f]]);
  const onLlama = { model: "m", sizeBytes: 8 * GiB, selector: {}, backend: "llama" };

  it("rules out a node whose cache cannot make room for the bundle, and says the bundle is what it must pull", () => {
    const nodes = [node({ nodeId: "small", diskFreeBytes: 512 * 1024 ** 2, diskEvictableBytes: 0, backendBundles: bundle({ installed: false, pullBytes: 1 * GiB }) }), node({ nodeId: "roomy", memoryUsedBytes: 10 * GiB, diskFreeBytes: 2 * GiB, backendBundles: bundle({ installed: false, pullBytes: 1 * GiB }) })];
    const plan = planPlacement(onLlama, nodes, "spread");
    expect(plan).toMatchObject({ t: "place", nodeId: "roomy" });
    expect(plan.verdicts.find((v) => v.nodeId === "small")?.reason).toBe("no disk room for its backend bundle: pull 1.0 GiB (bundle 1.0 GiB), the artifact cache can make 512.0 MiB");
    expect(planPlacement(onLlama, [nodes[0] as NodeCandidate], "spread").t).toBe("no-fit");
    // A model on another backend does not pull this bundle.
    expect(planPlacement({ ...onLlama, backend: "vllm" }, [nodes[0] as NodeCandidate], "spread")).toMatchObject({ t: "place", nodeId: "small" });
  });

  it("counts the bundle with the artifacts: room for the artifacts alone is not enough", () => {
    const nodes = [node({ nodeId: "tight", diskFreeBytes: 5 * GiB, cachedDigests: new Set(), backendBundles: bundle({ installed: false, pullBytes: 1 * GiB }) })];
    const plan = planPlacement({ ...onLlama, artifacts: weights }, nodes, "binpack");
    expect(plan.t).toBe("no-fit");
    expect(plan.verdicts[0]?.reason).toBe("no disk room for its artifacts and backend bundle: pull 5.2 GiB (bundle 1.0 GiB), the artifact cache can make 5.0 GiB");
    const roomy = planPlacement({ ...onLlama, artifacts: weights }, [node({ nodeId: "ok", diskFreeBytes: 6 * GiB, backendBundles: bundle({ installed: false, pullBytes: 1 * GiB }) })], "binpack");
    expect(roomy.verdicts[0]?.reason).toMatch(/; pull 5\.2 GiB \(bundle 1\.0 GiB\)\)$/);
  });

  it("prefers the node with the bundle installed over a better binpack score, and explains bundle cached / pull per node", () => {
    const nodes = [node({ nodeId: "busy", memoryUsedBytes: 10 * GiB, diskFreeBytes: 100 * GiB, backendBundles: bundle({ installed: false, pullBytes: 1 * GiB }) }), node({ nodeId: "warm", diskFreeBytes: 100 * GiB, backendBundles: bundle({ installed: true, pullBytes: undefined }) })];
    const plan = planPlacement(onLlama, nodes, "binpack");
    expect(plan).toMatchObject({ t: "place", nodeId: "warm" });
    expect(plan.verdicts.map((v) => v.reason)).toEqual([expect.stringMatching(/; pull 1\.0 GiB \(bundle 1\.0 GiB\)\)$/), expect.stringMatching(/; bundle cached\)$/)]);
    // With its artifacts cached there too, both are named.
    const warmAll = planPlacement({ ...onLlama, artifacts: weights }, [node({ nodeId: "warm", diskFreeBytes: 1, cachedDigests: new Set([a]), backendBundles: bundle({ installed: true, pullBytes: undefined }) })], "binpack");
    expect(warmAll.verdicts[0]?.reason).toMatch(/; cached, bundle cached\)$/);
  });

  it("a bundle of unknown size does not rule a node out, but a node with it installed is preferred", () => {
    const unknown = node({ nodeId: "a-unknown", diskFreeBytes: 0, backendBundles: bundle({ installed: false, pullBytes: undefined }) });
    const alone = planPlacement(onLlama, [unknown], "binpack");
    expect(alone).toMatchObject({ t: "place", nodeId: "a-unknown" });
    expect(alone.verdicts[0]?.reason).toMatch(/; bundle not installed, size unknown\)$/);
    const both = planPlacement(onLlama, [unknown, node({ nodeId: "b-installed", memoryUsedBytes: 10 * GiB, backendBundles: bundle({ installed: true, pullBytes: undefined }) })], "spread");
    expect(both).toMatchObject({ t: "place", nodeId: "b-installed" });
  });

  it("an agent that reports no bundle for the backend pulls nothing for it (an executable, or an older agent)", () => {
    expect(pullNeedOf(weights, "llama", { backendBundles: new Map() })).toEqual({ bytes: weights[0]?.sizeBytes, bundleBytes: undefined, bundle: undefined });
    expect(planPlacement(onLlama, [node({ nodeId: "old", diskFreeBytes: 0 })], "binpack").verdicts[0]?.reason).not.toMatch(/bundle|pull|cached/);
  });
});
