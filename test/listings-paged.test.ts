/**
 * ListNodes and ListModels a page at a time, against a real coordinator
 * process holding 1 200 nodes (simulated agents speaking the real
 * NodeService over gRPC, two adopted instances each):
 * - pages cover every node and instance exactly once, in order, while other
 *   nodes register and report instances between the pages;
 * - filters (node prefix or id, model, state) give exactly the matching
 *   entries, across pages;
 * - a request with no page fields gets the first 500 and a token;
 *   page_size past 1 000, a token that is not one, and a token sent with
 *   other filters or to the other listing are INVALID_ARGUMENT naming the field;
 * - `warden nodes ls` / `models ls` read every page, filter and stop at --limit;
 * - ExplainPlacement lists its verdicts a page at a time (100 by default),
 *   by node prefix, while its decision and counts weigh every node, and
 *   `warden explain` reads every page or stops at --limit.
 */
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, InstanceState, NodeState, type ExplainPlacementResponse, type ListModelsRequest, type ListNodesRequest, type ModelInstance, type Node } from "@warden/proto";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { freePort } from "./support/free-port.js";
import { startListingSwarm, type ListingNode, type ListingSwarm } from "./support/listing-nodes.js";
import { until } from "./support/coordinator-harness.js";

const root = resolve(import.meta.dirname, "..");
const cliMain = join(root, "services", "cli", "src", "main.ts");
const initialNodes = 1_200;
const id = (i: number): string => `n-${String(i).padStart(5, "0")}`;
// No model on more than 1 024 nodes (its replicas' max at most): a model above its max is scaled down at once.
const modelsOf = (i: number): string[] => (i % 3 === 0 ? ["m2", "m3"] : ["m0", "m1"]);

let dir: string;
let coordinator: CoordinatorProcess | undefined;
let swarm: ListingSwarm | undefined;
let admin: Client<typeof AdminService>;
const nodes = new Map<string, ListingNode>();

/** Registers nodes `from..to-1` (even numbers only when `even`), 32 at a time. */
async function addNodes(ids: readonly number[]): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < ids.length) {
        const i = ids[next++] as number;
        nodes.set(id(i), await (swarm as ListingSwarm).add(id(i), modelsOf(i)));
      }
    }),
  );
}

type NodesReq = Partial<Omit<ListNodesRequest, "$typeName">>;
type ModelsReq = Partial<Omit<ListModelsRequest, "$typeName">>;

/** Every page; `between` runs after each page (concurrent change). Checks each page's size. */
async function allNodes(req: NodesReq, between?: () => Promise<void>): Promise<{ nodes: Node[]; pages: number }> {
  const out: Node[] = [];
  let pageToken = "";
  let pages = 0;
  do {
    const r = await admin.listNodes({ ...req, pageToken }, { timeoutMs: 60_000 });
    expect(r.nodes.length).toBeLessThanOrEqual(req.pageSize === undefined || req.pageSize === 0 ? 500 : req.pageSize);
    out.push(...r.nodes);
    pageToken = r.nextPageToken;
    pages++;
    await between?.();
  } while (pageToken !== "");
  return { nodes: out, pages };
}

async function allInstances(req: ModelsReq, between?: () => Promise<void>): Promise<ModelInstance[]> {
  const out: ModelInstance[] = [];
  let pageToken = "";
  do {
    const r = await admin.listModels({ ...req, pageToken }, { timeoutMs: 60_000 });
    expect(r.instances.length).toBeLessThanOrEqual(req.pageSize === undefined || req.pageSize === 0 ? 500 : req.pageSize);
    // The configured models come with the first page only.
    expect(r.configured.length).toBe(pageToken === "" ? 4 : 0);
    out.push(...r.instances);
    pageToken = r.nextPageToken;
    await between?.();
  } while (pageToken !== "");
  return out;
}

function expectOnceInOrder(keys: readonly string[]): void {
  expect(new Set(keys).size).toBe(keys.length);
  expect([...keys].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))).toEqual(keys);
}

/** A node state no version of the API defines (sent as a newer client would). */
// eslint-disable-next-line @typescript-eslint/no-unsafe-enum-assignment -- outside the enum, as a newer or hostile client can put on the wire
const bogusNodeState: NodeState = Number("42");

const instanceKey = (i: ModelInstance): string => `${i.nodeId}\u0000${i.model}\u0000${i.incarnation}`;

async function failure(p: Promise<unknown>): Promise<WardenError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  return WardenError.from(e);
}

/** The field an INVALID_ARGUMENT names (its message starts with it). */
const fieldOf = (e: WardenError): string => (e.code === Code.InvalidArgument ? (e.rawMessage.split(":")[0] ?? "") : `not INVALID_ARGUMENT: ${String(e.code)} ${e.rawMessage}`);

function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, ["--import", "tsx", cliMain, ...args, "--addr", (coordinator as CoordinatorProcess).address], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    child.once("exit", (code) => {
      done({ code, stdout, stderr });
    });
  });
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-listings-"));
  coordinator = await startCoordinatorProcess(join(dir, "c.json"), {
    listen: `127.0.0.1:${String(await freePort())}`,
    stateDir: join(dir, "state"),
    embeddedAgent: false,
    // Silent nodes turn unreachable soon (the state filters need both kinds); never lost by time.
    nodeGrace: "5s",
    nodeLostAfter: "1h",
    // Every simulated node dials from 127.0.0.1.
    limits: { maxConnectionsPerPeer: 256 },
    // Replicas on many nodes: max high enough that none is above it (a lowered max is scaled down at once).
    models: ["m0", "m1", "m2", "m3"].map((m) => ({ id: m, backend: "backend-sim", replicas: { min: 0, max: 1024 } })),
  });
  admin = createClient(AdminService, coordinator.address);
  swarm = await startListingSwarm(coordinator.address);
  // Even ids now; the odd ones register while the test pages (they sort between them).
  await addNodes(Array.from({ length: initialNodes }, (_, k) => 2 * k));
}, 600_000);

afterAll(async () => {
  await swarm?.close();
  admin.close();
  await coordinator?.kill();
  await rm(dir, { recursive: true, force: true });
});

describe("paged listings at 1 200 nodes", () => {
  it("pages cover every node and instance exactly once, in order, while others register", async () => {
    const before = new Set(nodes.keys());
    const instancesBefore = new Set([...nodes.values()].flatMap((n) => n.backends.map((b) => `${n.nodeId}\u0000${b.model}\u0000${b.incarnation}`)));
    const late = Array.from({ length: 200 }, (_, k) => 2 * k * 3 + 1);
    let lateAt = 0;
    // Between pages: 10 more nodes (ids sorting before, inside and after the pages seen so far).
    const registerSome = async (): Promise<void> => {
      const batch = late.slice(lateAt, lateAt + 10);
      lateAt += batch.length;
      await addNodes(batch);
    };
    const { nodes: listed, pages } = await allNodes({ pageSize: 97 }, registerSome);
    expect(pages).toBeGreaterThan(initialNodes / 97);
    const ids = listed.map((n) => n.nodeId);
    expectOnceInOrder(ids);
    for (const n of before) expect(ids.includes(n), n).toBe(true);
    // Nothing that was never registered; the late ones appear at most once (checked above).
    expect(ids.filter((n) => !nodes.has(n))).toEqual([]);
    // Each node's instance count, from the per-node index: its two adopted backends.
    for (const n of listed.filter((x) => before.has(x.nodeId))) expect(n.instanceCount, n.nodeId).toBe(2);

    const instances = await allInstances({ pageSize: 333 }, registerSome);
    const keys = instances.map(instanceKey);
    expectOnceInOrder(keys);
    for (const k of instancesBefore) expect(keys.includes(k)).toBe(true);
    expect(instances.every((i) => i.state === InstanceState.READY)).toBe(true);
  }, 600_000);

  it("filters: node prefix and id, model, instance state, across pages", async () => {
    const all = (await allNodes({ pageSize: 1_000 })).nodes.map((n) => n.nodeId);
    const prefixed = (await allNodes({ nodeIdPrefix: "n-001", pageSize: 7 })).nodes.map((n) => n.nodeId);
    expect(prefixed).toEqual(all.filter((n) => n.startsWith("n-001")));
    expect(prefixed.length).toBeGreaterThan(7);
    // m2 runs on every third node only.
    const withM2 = (await allNodes({ model: "m2", pageSize: 50 })).nodes.map((n) => n.nodeId);
    expect(withM2).toEqual(all.filter((n) => Number(n.slice(2)) % 3 === 0));
    expect((await allNodes({ model: "nowhere" })).nodes).toEqual([]);

    const m2 = await allInstances({ model: "m2", pageSize: 100 });
    expect(m2.map((i) => i.nodeId)).toEqual(withM2);
    const one = await allInstances({ nodeId: id(12), pageSize: 1 });
    expect(one.map((i) => [i.nodeId, i.model])).toEqual([[id(12), "m2"], [id(12), "m3"]]);
    const total = (await allInstances({ pageSize: 1_000 })).length;
    expect(await allInstances({ state: InstanceState.READY, pageSize: 1_000 })).toHaveLength(total);
    expect(await allInstances({ state: InstanceState.LEFTOVER })).toEqual([]);
  }, 600_000);

  it("node state filters: unreachable, lost, ready", async () => {
    // Nobody beats any more: every node turns unreachable after the 5 s grace.
    const count = nodes.size;
    await until("every node unreachable", async () => (await allNodes({ state: NodeState.UNREACHABLE, pageSize: 1_000 })).nodes.length === count || undefined, 120_000);
    const lost = [id(2), id(500), id(1_000), id(2_398)];
    for (const n of lost) await admin.declareNodeLost({ nodeId: n, reason: "listing test" });
    expect((await allNodes({ state: NodeState.LOST, pageSize: 2 })).nodes.map((n) => n.nodeId)).toEqual(lost);
    expect((await allNodes({ state: NodeState.UNREACHABLE, pageSize: 1_000 })).nodes).toHaveLength(count - lost.length);
    expect((await allNodes({ state: NodeState.READY })).nodes).toEqual([]);
    // Both filters at once: the prefix narrows the state.
    expect((await allNodes({ state: NodeState.LOST, nodeIdPrefix: "n-01" })).nodes.map((n) => n.nodeId)).toEqual([id(1_000)]);
  }, 600_000);

  it("no page fields: the first 500 and a token; bad sizes and tokens are INVALID_ARGUMENT naming the field", async () => {
    const old = await admin.listNodes({});
    expect(old.nodes).toHaveLength(500);
    expect(old.nextPageToken).not.toBe("");
    const oldModels = await admin.listModels({});
    expect(oldModels.instances).toHaveLength(500);
    expect(oldModels.configured).toHaveLength(4);

    const big = await failure(admin.listNodes({ pageSize: 1_001 }));
    expect(fieldOf(big)).toBe("page_size");
    expect(fieldOf(await failure(admin.listModels({ pageSize: 5_000 })))).toBe("page_size");
    for (const pageToken of ["not a token", "eyJmIjoxfQ", "x".repeat(2_000)]) {
      const e = await failure(admin.listNodes({ pageToken }));
      expect(fieldOf(e), pageToken.slice(0, 20)).toBe("page_token");
    }
    // A token is for its own listing and filters.
    const t = (await admin.listNodes({ pageSize: 3, model: "m0" })).nextPageToken;
    expect(fieldOf(await failure(admin.listNodes({ pageSize: 3, model: "m1", pageToken: t })))).toBe("page_token");
    expect(fieldOf(await failure(admin.listModels({ pageToken: t })))).toBe("page_token");
    expect((await admin.listNodes({ pageSize: 3, model: "m0", pageToken: t })).nodes).toHaveLength(3);
    expect(fieldOf(await failure(admin.listNodes({ nodeIdPrefix: "a b" })))).toBe("node_id_prefix");
    expect(fieldOf(await failure(admin.listNodes({ state: bogusNodeState })))).toBe("state");
    expect(fieldOf(await failure(admin.listModels({ model: "-bad" })))).toBe("model");
  }, 120_000);

  it("ExplainPlacement: a page of verdicts at a time, in node id order, by prefix; its decision and counts weigh every node", async () => {
    const registered = (await allNodes({})).nodes.map((n) => n.nodeId);
    const first = await admin.explainPlacement({ model: "m2" }, { timeoutMs: 60_000 });
    expect(first.nodes.map((v) => v.nodeId)).toEqual(registered.slice(0, 100));
    expect(first.nextPageToken).not.toBe("");
    expect(first.nodesTotal).toBe(registered.length);
    expect(first.nodesFit + first.nodesFitAfterEviction).toBeLessThanOrEqual(first.nodesTotal);
    // Every page: every node's verdict exactly once, in order.
    const pages: ExplainPlacementResponse[] = [];
    let pageToken = "";
    do {
      const r = await admin.explainPlacement({ model: "m2", pageSize: 1_000, pageToken }, { timeoutMs: 60_000 });
      expect(r.nodes.length).toBeLessThanOrEqual(1_000);
      pages.push(r);
      pageToken = r.nextPageToken;
    } while (pageToken !== "");
    expect(pages.length).toBe(Math.ceil(registered.length / 1_000));
    expect(pages.flatMap((p) => p.nodes.map((v) => v.nodeId))).toEqual(registered);
    // By prefix: the registered ones of n-01000 … n-01009 (the odd ids registered while the first test paged), four a page.
    const byPrefix: string[][] = [];
    pageToken = "";
    do {
      const r = await admin.explainPlacement({ model: "m2", nodeIdPrefix: "n-0100", pageSize: 4, pageToken }, { timeoutMs: 60_000 });
      expect(r.nodesTotal).toBe(registered.length);
      byPrefix.push(r.nodes.map((v) => v.nodeId));
      pageToken = r.nextPageToken;
    } while (pageToken !== "");
    const tens = registered.filter((n) => n.startsWith("n-0100"));
    expect(tens.length).toBeGreaterThanOrEqual(5);
    expect(byPrefix).toEqual(Array.from({ length: Math.ceil(tens.length / 4) }, (_, k) => tens.slice(4 * k, 4 * k + 4)));
    // Refused whole, naming the field: a page past 1 000, a bad prefix, another listing's token or another model's.
    expect(fieldOf(await failure(admin.explainPlacement({ model: "m2", pageSize: 1_001 })))).toBe("page_size");
    expect(fieldOf(await failure(admin.explainPlacement({ model: "m2", nodeIdPrefix: "a b" })))).toBe("node_id_prefix");
    const listToken = (await admin.listNodes({ pageSize: 3 })).nextPageToken;
    expect(fieldOf(await failure(admin.explainPlacement({ model: "m2", pageToken: listToken })))).toBe("page_token");
    expect(fieldOf(await failure(admin.explainPlacement({ model: "m3", pageToken: first.nextPageToken })))).toBe("page_token");
    expect(fieldOf(await failure(admin.listNodes({ pageToken: first.nextPageToken })))).toBe("page_token");
  }, 240_000);

  it("warden explain reads every page, lists by --node prefix, and stops at --limit", async () => {
    const all = await cli(["explain", "m2", "--json"]);
    expect(all.code, all.stderr).toBe(0);
    const whole = JSON.parse(all.stdout) as { nodes: unknown[]; nodesTotal: number };
    expect(whole.nodes).toHaveLength(nodes.size);
    expect(whole.nodesTotal).toBe(nodes.size);
    const prefixed = await cli(["explain", "m2", "--node", "n-0100", "--json"]);
    expect(prefixed.code, prefixed.stderr).toBe(0);
    const tens = (await allNodes({ nodeIdPrefix: "n-0100" })).nodes.map((n) => n.nodeId);
    expect(tens.length).toBeGreaterThanOrEqual(5);
    expect((JSON.parse(prefixed.stdout) as { nodes: { nodeId: string }[] }).nodes.map((v) => v.nodeId)).toEqual(tens);
    const limited = await cli(["explain", "m2", "--limit", "5"]);
    expect(limited.code, limited.stderr).toBe(0);
    expect(limited.stdout).toMatch(new RegExp(`^${String(nodes.size)} node\\(s\\) weighed: \\d+ fit now, \\d+ after eviction$`, "m"));
    expect(limited.stdout.split("\n").filter((l) => /^│ n-\d{5} /.test(l))).toHaveLength(5);
    expect(limited.stderr).toContain("--limit 5");
  }, 240_000);

  it("warden nodes ls / models ls read every page, filter, and stop at --limit", async () => {
    const ls = await cli(["nodes", "ls", "--json"]);
    expect(ls.code, ls.stderr).toBe(0);
    expect((JSON.parse(ls.stdout) as { nodes: unknown[] }).nodes).toHaveLength(nodes.size);
    const filtered = await cli(["nodes", "ls", "--node", "n-010", "--state", "lost", "--json"]);
    expect(filtered.code, filtered.stderr).toBe(0);
    expect((JSON.parse(filtered.stdout) as { nodes: { nodeId: string }[] }).nodes.map((n) => n.nodeId)).toEqual([id(1_000)]);
    const limited = await cli(["models", "ls", "--model", "m2", "--limit", "5"]);
    expect(limited.code, limited.stderr).toBe(0);
    expect(limited.stdout.split("\n").filter((l) => l.includes(" m2 ")).length).toBe(5);
    expect(limited.stderr).toContain("--limit 5");
    const badState = await cli(["nodes", "ls", "--state", "sleepy"]);
    expect(badState.code).not.toBe(0);
    expect(badState.stderr).toContain("--state");
  }, 240_000);
});
