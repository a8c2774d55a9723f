/**
 * CPU per call, in process, of what an operator's listing and a Prometheus
 * scrape cost the coordinator at 1 000 and 10 000 nodes × 10 ready
 * replicas (listings-cluster.ts: the coordinator's own AdminService and
 * CoordinatorMetrics over a real Loader and NodeRegistry): a ListNodes page
 * (default size), the ListModels first page (with every model's replica
 * summary and the configured models), a later ListModels page, and one
 * `/metrics` text. A listing's figure includes encoding its answer
 * (create + toBinary, as the gRPC server does); CPU is `process.cpuUsage`
 * per call (user + system), median and p99 of 41 calls after 5 warm-ups.
 * `npm run bench -- listings`.
 *
 * Baselines, each measured in the same run:
 * - at 1 000 nodes, a floor: encoding the same answer alone (a listing) or
 *   prom-client's text of the scrape's per-node series alone, set once (a
 *   scrape: most of its bytes, at no cost of counting);
 * - at 10 000 nodes, the same call at 1 000 nodes × 10: a ratio above 1
 *   means the call grows slower than the cluster; and the scrape against
 *   the same per-node floor at 10 000 nodes.
 */
import { create, toBinary } from "@bufbuild/protobuf";
import { Gauge, Registry } from "prom-client";
import { InstanceState, ListModelsResponseSchema, ListNodesResponseSchema, NodeState, type ListModelsRequest, type ListNodesRequest } from "@warden/proto";
import type { HandlerContext } from "@warden/grpc";
import { cpuPerCall as cpuPerCallOf, median, p99Of, type BenchResult } from "./bench-result.js";
import { backendsPerNode, listingsCluster, type ListingsCluster } from "./listings-cluster.js";

const calls = 41;
const warmUps = 5;

const cpuPerCall = (fn: () => unknown): Promise<number[]> => cpuPerCallOf(calls, fn, warmUps);
const p99 = p99Of;

const ctx = {} as HandlerContext;
const nodesReq = (): ListNodesRequest => ({ $typeName: "warden.v1.ListNodesRequest", pageSize: 0, pageToken: "", nodeIdPrefix: "", state: NodeState.UNSPECIFIED, model: "" });
const modelsReq = (pageToken = ""): ListModelsRequest => ({ $typeName: "warden.v1.ListModelsRequest", pageSize: 0, pageToken, nodeId: "", model: "", state: InstanceState.UNSPECIFIED });

interface Row {
  readonly what: string;
  readonly call: () => Promise<unknown>;
  /** The floor at 1 000 nodes: what any answer pays. */
  readonly floor: () => Promise<unknown>;
  readonly floorName: string;
}

/** The scrape's two per-node gauges (one series per node each) in a registry of their own, set once: the text alone. */
function perNodeText(c: ListingsCluster): () => Promise<string> {
  const r = new Registry();
  const instances = new Gauge({ name: "warden_instances", help: "Instances by node and state.", labelNames: ["node", "state"], registers: [r] });
  const inFlight = new Gauge({ name: "warden_in_flight_requests", help: "Calls in flight, by node.", labelNames: ["node"], registers: [r] });
  for (const n of c.registry.list()) {
    instances.set({ node: n.nodeId, state: "ready" }, backendsPerNode);
    inFlight.set({ node: n.nodeId }, 0);
  }
  return () => r.metrics();
}

async function rows(c: ListingsCluster): Promise<{ rows: Row[]; bytes: Record<string, number> }> {
  const nodesPage = await c.admin.listNodes(nodesReq(), ctx);
  const firstPage = await c.admin.listModels(modelsReq(), ctx);
  const token = firstPage.nextPageToken ?? "";
  if (token === "") throw new Error("ListModels: one page holds the whole cluster; the bench wants a later page");
  const laterPage = await c.admin.listModels(modelsReq(token), ctx);
  const encodeNodes = (v: typeof nodesPage): Uint8Array => toBinary(ListNodesResponseSchema, create(ListNodesResponseSchema, v as never));
  const encodeModels = (v: typeof firstPage): Uint8Array => toBinary(ListModelsResponseSchema, create(ListModelsResponseSchema, v as never));
  const text = await c.metrics.registry.metrics();
  const bytes = { nodes: encodeNodes(nodesPage).length, first: encodeModels(firstPage).length, later: encodeModels(laterPage).length, metrics: Buffer.byteLength(text) };
  const encodeFloor = "encoding the same answer alone (create + toBinary)";
  return {
    bytes,
    rows: [
      { what: "ListNodes page (default size)", call: async () => encodeNodes(await c.admin.listNodes(nodesReq(), ctx)), floor: async () => encodeNodes(nodesPage), floorName: encodeFloor },
      { what: "ListModels first page (with replicas)", call: async () => encodeModels(await c.admin.listModels(modelsReq(), ctx)), floor: async () => encodeModels(firstPage), floorName: encodeFloor },
      { what: "ListModels later page", call: async () => encodeModels(await c.admin.listModels(modelsReq(token), ctx)), floor: async () => encodeModels(laterPage), floorName: encodeFloor },
      { what: "/metrics scrape (the registry's text)", call: () => c.metrics.registry.metrics(), floor: perNodeText(c), floorName: "prom-client's text of the per-node series alone, set once" },
    ],
  };
}

export async function run(): Promise<BenchResult[]> {
  const out: BenchResult[] = [];
  const small = listingsCluster(1_000);
  const smallRows = await rows(small);
  // Every call warmed up first (JIT), so the first row measured pays no more for compiling than the last.
  for (const r of smallRows.rows) for (let i = 0; i < warmUps; i++) await r.call();
  const medians: number[] = [];
  for (const r of smallRows.rows) {
    const ours = await cpuPerCall(r.call);
    const floor = await cpuPerCall(r.floor);
    medians.push(median(ours));
    process.stderr.write(`listings 1000 nodes: ${r.what}: median ${median(ours).toFixed(2)} p99 ${p99(ours).toFixed(2)} ms CPU; floor ${median(floor).toFixed(2)} ms\n`);
    const label = `1 000 nodes × ${String(backendsPerNode)}`;
    out.push({ name: `${r.what}, CPU per call, median (${label})`, baseline: r.floorName, ours: median(ours), baselineValue: median(floor), unit: "ms CPU", higherIsBetter: false });
    out.push({ name: `${r.what}, CPU per call, p99 (${label})`, baseline: r.floorName, ours: p99(ours), baselineValue: p99(floor), unit: "ms CPU", higherIsBetter: false });
  }
  process.stderr.write(`listings 1000 nodes: bytes ${JSON.stringify(smallRows.bytes)}\n`);
  small.close();
  const big = listingsCluster(10_000);
  const bigRows = await rows(big);
  for (const [i, r] of bigRows.rows.entries()) {
    const ours = await cpuPerCall(r.call);
    const linear = (medians[i] ?? 0) * 10;
    process.stderr.write(`listings 10000 nodes: ${r.what}: median ${median(ours).toFixed(2)} p99 ${p99(ours).toFixed(2)} ms CPU; 10 × the 1 000-node median ${linear.toFixed(2)} ms\n`);
    const label = `10 000 nodes × ${String(backendsPerNode)}`;
    const baseline = "10 × the same call's median at 1 000 nodes (linear growth)";
    out.push({ name: `${r.what}, CPU per call, median (${label})`, baseline, ours: median(ours), baselineValue: linear, unit: "ms CPU", higherIsBetter: false });
    out.push({ name: `${r.what}, CPU per call, p99 (${label})`, baseline, ours: p99(ours), baselineValue: linear, unit: "ms CPU", higherIsBetter: false });
    if (r.what.startsWith("/metrics")) {
      const floor = await cpuPerCall(r.floor);
      process.stderr.write(`listings 10000 nodes: ${r.floorName}: median ${median(floor).toFixed(2)} p99 ${p99(floor).toFixed(2)} ms CPU\n`);
      out.push({ name: `${r.what}, CPU per call, median (${label}), against its per-node text`, baseline: r.floorName, ours: median(ours), baselineValue: median(floor), unit: "ms CPU", higherIsBetter: false });
    }
  }
  process.stderr.write(`listings 10000 nodes: bytes ${JSON.stringify(bigRows.bytes)}\n`);
  big.close();
  return out;
}
