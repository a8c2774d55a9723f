import { InstanceState, NodeState, instanceStateNames, nodeStateNames, type AdminService } from "@warden/proto";
import type { Client } from "@warden/grpc";
import { invalidArgument } from "@warden/common";
import type { DashboardInstance, DashboardNode } from "./dashboard-view.js";
import { dashboardInstance, dashboardNode } from "./dashboard-snapshot.js";

/**
 * GET /api/dashboard/nodes and /api/dashboard/models: one page of the Admin
 * API's ListNodes / ListModels as dashboard JSON, with the same bounds and
 * token (page_size 1..1000, default 500; page_token; filters). Query keys:
 * nodes — page_size, page_token, node (id prefix), model, state
 * (ready|unreachable|lost|not-reported); models — page_size, page_token, node (exact id),
 * model, state (loading|ready|freed|pending-eviction|leftover|orphan|unconfirmed).
 */

export const nodesQueryKeys = ["page_size", "page_token", "node", "model", "state"] as const;
export const modelsQueryKeys = nodesQueryKeys;

const nodeStates = nodeStateNames;
const instanceStates = instanceStateNames;

function pageSizeOf(text: string | undefined): number {
  if (text === undefined) return 0;
  // The Admin API checks the range and names page_size; here only that it is a number.
  if (!/^[0-9]{1,7}$/.test(text)) throw invalidArgument("page_size", `a whole number 1..1000, got "${text.slice(0, 32)}"`);
  return Number(text);
}

function stateOf<S>(names: Readonly<Record<string, S>>, text: string | undefined, unspecified: S): S {
  if (text === undefined || text === "") return unspecified;
  const s = names[text];
  if (s === undefined) throw invalidArgument("state", `one of ${Object.keys(names).join(", ")}, got "${text.slice(0, 32)}"`);
  return s;
}

export async function nodesPage(admin: Pick<Client<typeof AdminService>, "listNodes">, accountedBytes: (nodeId: string) => number, q: Readonly<Record<string, string>>, signal: AbortSignal): Promise<{ nodes: DashboardNode[]; nextPageToken: string }> {
  const r = await admin.listNodes({ pageSize: pageSizeOf(q.page_size), pageToken: q.page_token ?? "", nodeIdPrefix: q.node ?? "", model: q.model ?? "", state: stateOf(nodeStates, q.state, NodeState.UNSPECIFIED) }, { signal });
  return { nodes: r.nodes.map((n) => dashboardNode(n, accountedBytes(n.nodeId))), nextPageToken: r.nextPageToken };
}

export async function modelsPage(admin: Pick<Client<typeof AdminService>, "listModels">, q: Readonly<Record<string, string>>, signal: AbortSignal): Promise<{ instances: DashboardInstance[]; nextPageToken: string }> {
  const r = await admin.listModels({ pageSize: pageSizeOf(q.page_size), pageToken: q.page_token ?? "", nodeId: q.node ?? "", model: q.model ?? "", state: stateOf(instanceStates, q.state, InstanceState.UNSPECIFIED) }, { signal });
  return { instances: r.instances.map(dashboardInstance), nextPageToken: r.nextPageToken };
}
