/**
 * ExplainPlacement answers one page of the nodes' verdicts, over a real
 * WatchdogCore and the coordinator's PlacementView: the decision and the
 * counts weigh every node whatever the page, the pages together are the
 * verdicts an explanation of every node gives, and only the listed nodes'
 * evictions are read.
 */
import { describe, expect, it, vi } from "vitest";
import { Code, isWardenError } from "@warden/common";
import { PlacementDecision } from "@warden/proto";
import { modelSpec, type Loader, type ModelSpec } from "@warden/loader";
import type { PlacementNode, PlacementNodes } from "@warden/cluster";
import { createWatchdogCore, type WatchdogCore } from "@warden/watchdog";
import { explainPageOf, explainPlacement, type ExplainPageAsk } from "./explain-placement.js";
import { PlacementView } from "./placement-view.js";

const GiB = 1024 ** 3;

interface Cluster {
  readonly core: WatchdogCore;
  readonly view: PlacementView;
  readonly explain: (s: ModelSpec, page: Partial<Parameters<typeof explainPageOf>[0]>) => ReturnType<typeof explainPlacement>;
}

/**
 * `nodeCount` ready nodes n000…, with 80 GiB each and a limit of 2 instances per node: every
 * third node holds two idle instances (fits after eviction), every third one 79 GiB in one
 * busy instance (fits nowhere), the rest nothing (fits).
 */
function cluster(nodeCount: number, fitting: (n: number) => "fit" | "evict" | "none" = (n) => (["fit", "evict", "none"] as const)[n % 3] ?? "fit"): Cluster {
  const core = createWatchdogCore({ clock: { now: () => 1_000 }, loader: { hasModelAtAddress: () => true }, policy: { limitPerNode: 2 } });
  const list: PlacementNode[] = [];
  let seq = 0;
  for (let n = 0; n < nodeCount; n++) {
    const nodeId = `n${String(n).padStart(3, "0")}`;
    list.push({ nodeId, state: "ready", draining: false, labels: {}, backends: new Set<string>(), resources: { $typeName: "warden.v1.NodeResources", gpus: [{ $typeName: "warden.v1.GpuInfo", index: 0, name: "gpu", totalBytes: BigInt(80 * GiB), usedBytes: 0n }], ramTotalBytes: 0n, ramUsedBytes: 0n } });
    const kind = fitting(n);
    const add = (sizeBytes: number, busy: boolean): void => {
      seq++;
      const address = `10.0.${String(seq >> 8)}.${String(seq & 255)}:5000`;
      core.registerReady({ nodeId, model: `o${String(seq)}`, incarnation: `inc-${String(seq)}`, address, sizeBytes, groups: [] });
      if (busy) core.mark(address);
    };
    if (kind === "evict") {
      add(GiB, false);
      add(GiB, false);
    } else if (kind === "none") {
      add(79 * GiB, true);
    }
  }
  const nodes: PlacementNodes = { list: () => list, limitsOf: () => ({ maxReplicasPerModel: 4 }) };
  const view = new PlacementView(nodes, "binpack");
  view.attach({ core, getPolicy: () => core.getPolicy(), leftoverList: () => [], journalReplicas: { ofModel: () => [].values(), nodeReported: () => [] }, startingElsewhere: () => [].values() } as unknown as Loader);
  const explain: Cluster["explain"] = (s, page) => explainPlacement({ core, placement: view, nowMs: 1_000 }, s, undefined, explainPageOf({ model: s.id, pageSize: 0, pageToken: "", nodeIdPrefix: "", ...page }));
  return { core, view, explain };
}

const spec = (sizeBytes = 2 * GiB): ModelSpec => modelSpec({ id: "m", backend: "backend-sim", sizeBytes, spread: "any", replicas: { min: 0, max: 2, targetInFlight: 4, scaleDownAfterMs: 300_000 } });

/** Every page, following the tokens from the first. */
async function allPages(c: Cluster, s: ModelSpec, page: Partial<Parameters<typeof explainPageOf>[0]>): Promise<Awaited<ReturnType<typeof explainPlacement>>[]> {
  const pages = [];
  let token = "";
  for (let i = 0; i < 100; i++) {
    const r = await c.explain(s, { ...page, pageToken: token });
    pages.push(r);
    token = r.nextPageToken ?? "";
    if (token === "") return pages;
  }
  throw new Error("the tokens never ended");
}

describe("ExplainPlacement's verdicts come a page at a time", () => {
  it("250 nodes: 100 by default from the first, in node id order, with the counts of every node; the pages together are every node's verdict as the whole explanation gives it", async () => {
    const c = cluster(250);
    const s = spec();
    const first = await c.explain(s, {});
    expect(first.nodes?.map((v) => v.nodeId)).toEqual(Array.from({ length: 100 }, (_, i) => `n${String(i).padStart(3, "0")}`));
    expect(first.nextPageToken).not.toBe("");
    // n000 fits (nothing there); binpack takes the fitting node with the least room left: all fitting nodes are alike, the smallest id wins.
    expect(first).toMatchObject({ decision: PlacementDecision.PLACE, nodeId: "n000", nodesTotal: 250, nodesFit: 84, nodesFitAfterEviction: 83 });
    expect(first.reason).toMatch(/^node "n000": fits/);
    const pages = await allPages(c, s, {});
    expect(pages.map((p) => p.nodes?.length)).toEqual([100, 100, 50]);
    for (const p of pages) expect(p).toMatchObject({ decision: first.decision, nodeId: first.nodeId, reason: first.reason, nodesTotal: 250, nodesFit: 84, nodesFitAfterEviction: 83 });
    // The same reasons and figures as the plan explained for every node at once (the rules did not change).
    const whole = c.view.plan(s, true).verdicts;
    const listed = pages.flatMap((p) => p.nodes ?? []);
    expect(listed.map((v) => [v.nodeId, v.fits, v.reason])).toEqual(whole.map((v) => [v.nodeId, v.fits, v.reason]));
    expect(listed.filter((v) => (v.wouldEvict?.length ?? 0) > 0)).toHaveLength(83);
    // page_size up to 1000: all in one.
    const one = await c.explain(s, { pageSize: 1000 });
    expect(one.nodes).toHaveLength(250);
    expect(one.nextPageToken).toBe("");
  });

  it("node_id_prefix lists only those nodes, in pages, while the decision weighs every node", async () => {
    // Only n249 fits: the decision names it whatever the page lists.
    const c = cluster(250, (n) => (n === 249 ? "fit" : "none"));
    const s = spec();
    const pages = await allPages(c, s, { nodeIdPrefix: "n01", pageSize: 4 });
    expect(pages.map((p) => p.nodes?.map((v) => v.nodeId))).toEqual([
      ["n010", "n011", "n012", "n013"],
      ["n014", "n015", "n016", "n017"],
      ["n018", "n019"],
    ]);
    for (const p of pages) expect(p).toMatchObject({ decision: PlacementDecision.PLACE, nodeId: "n249", nodesTotal: 250, nodesFit: 1, nodesFitAfterEviction: 0 });
    // A prefix no node has: no verdict, no token, the same decision.
    expect(await c.explain(s, { nodeIdPrefix: "x" })).toMatchObject({ nodes: [], nextPageToken: "", decision: PlacementDecision.PLACE, nodeId: "n249" });
    // A page that ends exactly at the prefix's last node has no token.
    expect((await c.explain(s, { nodeIdPrefix: "n01", pageSize: 10 })).nextPageToken).toBe("");
  });

  it("reads what an admission would evict for the listed nodes only", async () => {
    const c = cluster(300);
    const withEvictions: string[] = [];
    const summary = c.core.placementSummary.bind(c.core);
    vi.spyOn(c.core, "placementSummary").mockImplementation((...a: Parameters<typeof summary>) => {
      if (a[3] !== undefined) withEvictions.push(a[0]);
      return summary(...a);
    });
    const r = await c.explain(spec(), { pageSize: 20, nodeIdPrefix: "n1" });
    expect(withEvictions).toEqual(r.nodes?.map((v) => v.nodeId));
    expect(withEvictions).toHaveLength(20);
  });

  it("a no-fit names the first 10 nodes' reasons and counts the rest: at 10 000 nodes the whole list was a reason of about a megabyte", async () => {
    const c = cluster(40, () => "none");
    const r = await c.explain(spec(), { pageSize: 1 });
    expect(r.decision).toBe(PlacementDecision.WAIT);
    expect(r.reason).toMatch(/^no node fits: n000: .*; n009: [^;]*; … and 30 more nodes$/);
    expect(r.reason).not.toContain("n010");
    expect(r).toMatchObject({ nodesTotal: 40, nodesFit: 0, nodesFitAfterEviction: 0 });
  });
});

describe("ExplainPlacement's page is checked whole before anything is read", () => {
  const bad = (page: Partial<Parameters<typeof explainPageOf>[0]>): unknown => {
    try {
      explainPageOf({ model: "m", pageSize: 0, pageToken: "", nodeIdPrefix: "", ...page });
      return undefined;
    } catch (err) {
      return err;
    }
  };

  it("page_size over 1000, a prefix no node id could start with, a token of another model, prefix or listing: INVALID_ARGUMENT naming the field", async () => {
    const field = (err: unknown): string => (isWardenError(err, Code.InvalidArgument) ? String(err.details.field) : `not INVALID_ARGUMENT: ${String(err)}`);
    expect(field(bad({ pageSize: 1001 }))).toBe("page_size");
    expect(field(bad({ nodeIdPrefix: "a b" }))).toBe("node_id_prefix");
    expect(field(bad({ nodeIdPrefix: "x".repeat(300) }))).toBe("node_id_prefix");
    expect(field(bad({ pageToken: "not a token!" }))).toBe("page_token");
    const c = cluster(20);
    const token = (await c.explain(spec(), { pageSize: 5 })).nextPageToken ?? "";
    expect(token).not.toBe("");
    expect(bad({ pageToken: token })).toBeUndefined();
    expect(field(bad({ pageToken: token, model: "other" }))).toBe("page_token");
    expect(field(bad({ pageToken: token, nodeIdPrefix: "n0" }))).toBe("page_token");
    // ListNodes' tokens carry their own listing: not one of ExplainPlacement's.
    const listNodesToken = Buffer.from(JSON.stringify({ f: JSON.stringify(["nodes", "", 0, ""]), n: "n004" }), "utf8").toString("base64url");
    expect(field(bad({ pageToken: listNodesToken }))).toBe("page_token");
  });

  it("the default page is 100; page_size 1000 is allowed", () => {
    expect(explainPageOf({ model: "m", pageSize: 0, pageToken: "", nodeIdPrefix: "" })).toMatchObject<Partial<ExplainPageAsk>>({ size: 100, nodeIdPrefix: "" });
    expect(explainPageOf({ model: "m", pageSize: 1000, pageToken: "", nodeIdPrefix: "" }).size).toBe(1000);
  });
});
