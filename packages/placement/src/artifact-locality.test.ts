import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { diskRoomBytes, formatBytes, planPlacement, pullBytesOf, type NodeCandidate } from "./index.js";
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

  it("property: the chosen node has room for its pull, and no other candidate of its spread tier that fits as well pulls less", () => {
    const digests = ["1", "2", "3", "4"].map((c) => c.repeat(64));
    const arbNode = (i: number) =>
      fc.record({ used: fc.integer({ min: 0, max: 24 }), free: fc.option(fc.integer({ min: 0, max: 40 }), { nil: undefined }), evictable: fc.integer({ min: 0, max: 10 }), held: fc.subarray(digests) }).map(
        (r): NodeCandidate => node({ nodeId: `n${String(i)}`, memoryUsedBytes: r.used * GiB, ...(r.free === undefined ? {} : { diskFreeBytes: r.free * GiB, diskEvictableBytes: r.evictable * GiB }), cachedDigests: new Set(r.held) }),
      );
    const arb = fc.record({
      nodes: fc.integer({ min: 1, max: 6 }).chain((k) => fc.tuple(...Array.from({ length: k }, (_, i) => arbNode(i)))),
      need: fc.subarray(digests, { minLength: 1 }).chain((ds) => fc.tuple(...ds.map((d) => fc.integer({ min: 1, max: 20 }).map((g) => ({ sha256: d, sizeBytes: g * GiB }))))),
      strategy: fc.constantFrom("binpack" as const, "spread" as const),
    });
    fc.assert(
      fc.property(arb, ({ nodes, need, strategy }) => {
        const plan = planPlacement({ model: "m", sizeBytes: 4 * GiB, selector: {}, artifacts: need }, nodes, strategy);
        if (plan.t === "no-fit") {
          // Only disk or memory can rule these nodes out: none has room for its pull and memory.
          for (const n of nodes) expect(pullBytesOf(need, n) > diskRoomBytes(n) || n.memoryUsedBytes + 4 * GiB > n.memoryTotalBytes).toBe(true);
          return;
        }
        const chosen = nodes.find((n) => n.nodeId === plan.nodeId) as NodeCandidate;
        expect(pullBytesOf(need, chosen)).toBeLessThanOrEqual(diskRoomBytes(chosen));
        const v = plan.verdicts.find((x) => x.nodeId === plan.nodeId);
        for (const o of plan.verdicts) {
          const sameKind = plan.t === "place" ? o.fits : o.fitsAfterEviction && !plan.verdicts.some((x) => x.fits);
          if (sameKind && o.spreadTier === v?.spreadTier) expect(o.pullBytes ?? 0).toBeGreaterThanOrEqual(v.pullBytes ?? 0);
        }
      }),
      { numRuns: 300 },
    );
  });
});
