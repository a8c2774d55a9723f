import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { InstanceState, NodeState, Placement, type ListModelsRequest, type ListNodesRequest } from "@warden/proto";
import { invalidArgument, type Clock } from "@warden/common";
import type { Loader } from "@warden/loader";
import type { BackendClientHandle } from "../routing/backend-connector.js";
import type { NodeRecord, NodeRegistry } from "../nodes/node-registry.js";
import { checkId } from "./check-id.js";
import { lostPlaceholder, modelInstance, nodeStateOf, type ModelInstanceInit, type NodeInit, type OutageView } from "./admin-messages.js";
import { checkNodeIdPrefix, compareIds, decodePageToken, encodePageToken, idsFrom, pageScanBudget, pageSizeOf, type PageKey } from "./listing-page.js";

/**
 * ListNodes and ListModels a page at a time (listing-page.ts): each page
 * starts by a binary search in the node table's sorted list and then walks
 * only the nodes it shows (per-node indexes for their instances), so a page
 * costs O(log n + what it looks at), never the whole cluster.
 */
export interface ListingDeps {
  readonly clock: Clock;
  readonly loader: Loader<BackendClientHandle>;
  readonly nodes: NodeRegistry;
  /** HA: nodes the store says are lost and that have not registered with this leader. */
  readonly lostUnregistered?: () => Iterable<string>;
  /** Nodes known from before the restart (registered or not). */
  readonly knownIds?: () => Iterable<string>;
  /** How ListNodes shows a node that has not registered since the restart (undefined: not known from before it). */
  readonly unregisteredView?: (nodeId: string) => NodeInit | undefined;
  /** A node's state as its instances show it (NOT_REPORTED / LOST for nodes not registered since the restart). @default from the registry */
  readonly nodeStateOf?: (nodeId: string) => NodeState;
  /** Instances serving through their agent's outage. @default none */
  readonly outage?: OutageView;
  /** A node as ListNodes shows it, given its instance count. */
  readonly nodeView: (n: NodeRecord, instanceCount: number) => NodeInit;
}

/** Instances of a node, leftovers included: O(instances there). */
export function instanceCountOn(d: Pick<ListingDeps, "loader">, nodeId: string): number {
  return d.loader.core.instanceCountOn(nodeId) + d.loader.leftoversOn(nodeId).length;
}

/** Everything one node holds as ListModels shows it, in (model, incarnation) order: instances, leftovers, orphans. */
export function instancesOnNode(d: Pick<ListingDeps, "clock" | "loader" | "nodes" | "nodeStateOf" | "outage">, nodeId: string): ModelInstanceInit[] {
  const n = d.nodes.get(nodeId);
  const nodeState = d.nodeStateOf?.(nodeId) ?? nodeStateOf(n);
  const out: ModelInstanceInit[] = d.loader.core.instancesOnNode(nodeId).map((v) => modelInstance(d, v, nodeState));
  for (const l of d.loader.leftoversOn(nodeId)) {
    out.push({
      model: l.model,
      nodeId: l.nodeId,
      address: l.address,
      incarnation: l.incarnation,
      placement: Placement.REMOTE_ONLY,
      state: InstanceState.LEFTOVER,
      groups: [...l.groups],
      sizeBytes: BigInt(l.sizeBytes),
      leftover: { attempts: l.attempts, lastError: l.lastError, since: timestampFromMs(l.sinceWallMs), stuck: l.stuck },
      // UNSPECIFIED: its node has not registered since this coordinator started.
      nodeState,
    });
  }
  for (const o of n?.orphans ?? []) out.push({ model: o.model, nodeId, address: o.address, incarnation: `pid:${String(o.pid)}`, state: InstanceState.ORPHAN, sizeBytes: o.memoryBytes, nodeState });
  return out.sort((a, b) => compareIds(a.model ?? "", b.model ?? "") || compareIds(a.incarnation ?? "", b.incarnation ?? ""));
}

const nodeStates = new Set<NodeState>([NodeState.UNSPECIFIED, NodeState.READY, NodeState.UNREACHABLE, NodeState.LOST, NodeState.NOT_REPORTED]);
const instanceStates = new Set<InstanceState>(Object.values(InstanceState).filter((v): v is InstanceState => typeof v === "number"));

/** ListNodes: one page in node id order, filtered. */
export function listNodesPage(d: ListingDeps, req: ListNodesRequest): { nodes: NodeInit[]; nextPageToken: string } {
  const size = pageSizeOf(req.pageSize);
  checkNodeIdPrefix(req.nodeIdPrefix);
  if (!nodeStates.has(req.state)) throw invalidArgument("state", `unknown node state ${String(req.state)}`);
  if (req.model !== "") checkId(req.model, "model");
  const filters = JSON.stringify(["nodes", req.nodeIdPrefix, req.state, req.model]);
  const after = decodePageToken(req.pageToken, filters);
  const registered = d.nodes.list();
  // Nodes listed without a registration: lost ones the HA store names, and nodes known from before the restart (few).
  const unregistered = new Set<string>([...(d.lostUnregistered?.() ?? []), ...(d.knownIds?.() ?? [])]);
  const lost = [...unregistered].filter((id) => d.nodes.get(id) === undefined).sort(compareIds);
  const start = after !== undefined ? (compareIds(after.n, req.nodeIdPrefix) < 0 ? { from: req.nodeIdPrefix } : { after: after.n }) : req.nodeIdPrefix === "" ? undefined : { from: req.nodeIdPrefix };
  const holds = (nodeId: string): boolean => d.loader.core.instancesOnNode(nodeId).some((v) => v.model === req.model) || d.loader.leftoversOn(nodeId).some((l) => l.model === req.model) || (d.nodes.get(nodeId)?.orphans.some((o) => o.model === req.model) ?? false);
  const nodes: NodeInit[] = [];
  let looked = 0;
  let prev: string | undefined;
  for (const id of idsFrom(registered, lost, start)) {
    if (!id.startsWith(req.nodeIdPrefix)) break;
    // Full, or looked far enough: the page covered everything up to `prev`.
    if (prev !== undefined && (nodes.length === size || looked >= pageScanBudget)) return { nodes, nextPageToken: encodePageToken(filters, { n: prev }) };
    prev = id;
    looked++;
    const n = d.nodes.get(id);
    const view = n === undefined ? (d.unregisteredView?.(id) ?? lostPlaceholder(id)) : d.nodeView(n, instanceCountOn(d, id));
    const state = n === undefined ? (view.state ?? NodeState.LOST) : nodeStateOf(n);
    if (req.state !== NodeState.UNSPECIFIED && state !== req.state) continue;
    if (req.model !== "" && !holds(id)) continue;
    nodes.push(view);
  }
  return { nodes, nextPageToken: "" };
}

/** Nodes holding leftovers that are not registered (restored from the journal at start): few, sorted. */
function unregisteredLeftoverNodes(d: Pick<ListingDeps, "loader" | "nodes">): string[] {
  const ids = new Set<string>();
  for (const l of d.loader.leftoverList()) if (d.nodes.get(l.nodeId) === undefined) ids.add(l.nodeId);
  return [...ids].sort(compareIds);
}

/** ListModels' instances: one page in (node, model, incarnation) order, filtered. */
export function listModelsPage(d: ListingDeps, req: ListModelsRequest): { instances: ModelInstanceInit[]; nextPageToken: string } {
  const size = pageSizeOf(req.pageSize);
  if (req.nodeId !== "") checkId(req.nodeId, "node_id");
  if (req.model !== "") checkId(req.model, "model");
  if (!instanceStates.has(req.state)) throw invalidArgument("state", `unknown instance state ${String(req.state)}`);
  const filters = JSON.stringify(["models", req.nodeId, req.model, req.state]);
  const after = decodePageToken(req.pageToken, filters);
  const ids: Iterable<string> =
    req.nodeId !== ""
      ? after === undefined || (after.n === req.nodeId && after.m !== undefined) ? [req.nodeId] : []
      : idsFrom(d.nodes.list(), unregisteredLeftoverNodes(d), after === undefined ? undefined : after.m === undefined ? { after: after.n } : { from: after.n });
  const matches = (i: ModelInstanceInit): boolean => (req.model === "" || i.model === req.model) && (req.state === InstanceState.UNSPECIFIED || i.state === req.state);
  const instances: ModelInstanceInit[] = [];
  let looked = 0;
  // Where the page has covered everything up to (the token it hands out).
  let prev: PageKey | undefined = after;
  for (const id of ids) {
    if (prev !== undefined && (instances.length === size || looked >= pageScanBudget)) return { instances, nextPageToken: encodePageToken(filters, prev) };
    // Resuming inside the node the last page stopped in: only what sorts after its last instance.
    const resume = after?.m !== undefined && after.n === id ? after : undefined;
    const items = instancesOnNode(d, id).filter((i) => resume === undefined || compareIds(i.model ?? "", resume.m ?? "") > 0 || (i.model === resume.m && compareIds(i.incarnation ?? "", resume.i ?? "") > 0));
    looked += 1 + items.length;
    for (const i of items) {
      if (!matches(i)) continue;
      if (instances.length === size) return { instances, nextPageToken: encodePageToken(filters, prev ?? { n: id, m: "", i: "" }) };
      instances.push(i);
      prev = { n: id, m: i.model ?? "", i: i.incarnation ?? "" };
    }
    prev = { n: id };
  }
  return { instances, nextPageToken: "" };
}
