import { InstanceState, NodeState, instanceStateNames, nodeStateNames, type AdminService, type ExplainPlacementRequest, type ExplainPlacementResponse, type ListModelsRequest, type ListModelsResponse, type ListNodesRequest, type ListNodesResponse } from "@warden/proto";
import type { Client } from "@warden/grpc";
import { invalidArgument } from "@warden/common";

/**
 * `nodes ls`, `models ls` and `explain` read every page by default (the
 * Admin API answers at most 1 000 entries a call); `--limit` stops early.
 * Filters go to the coordinator, which applies them before paging.
 */

/** The largest page the API serves. */
const maxPageSize = 1_000;
/** --limit's bound (far above any cluster's instance count). */
export const maxListLimit = 1_000_000;

export function parseLimit(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!/^[0-9]+$/.test(text) || !Number.isSafeInteger(n) || n < 1 || n > maxListLimit) throw invalidArgument("--limit", `a whole number 1..${String(maxListLimit)}, got "${text.slice(0, 32)}"`);
  return n;
}

export const nodeStateChoices = Object.keys(nodeStateNames);
export const instanceStateChoices = Object.keys(instanceStateNames);

function stateOf<S>(names: Readonly<Record<string, S>>, text: string | undefined, unspecified: S): S {
  if (text === undefined) return unspecified;
  const s = names[text];
  if (s === undefined) throw invalidArgument("--state", `one of ${Object.keys(names).join(", ")}, got "${text.slice(0, 32)}"`);
  return s;
}

export const nodeStateFilter = (text: string | undefined): NodeState => stateOf(nodeStateNames, text, NodeState.UNSPECIFIED);
export const instanceStateFilter = (text: string | undefined): InstanceState => stateOf(instanceStateNames, text, InstanceState.UNSPECIFIED);

/** Every page of `call` (or up to `limit` entries); the answer's token is where a cut-off listing would go on. */
async function allPages<R extends { nextPageToken: string }>(limit: number | undefined, call: (pageSize: number, pageToken: string) => Promise<R>, entries: (r: R) => unknown[]): Promise<R> {
  let token = "";
  let first: R | undefined;
  const all: unknown[] = [];
  for (;;) {
    const want = limit === undefined ? maxPageSize : Math.min(maxPageSize, limit - all.length);
    const r = await call(want, token);
    first ??= r;
    all.push(...entries(r));
    token = r.nextPageToken;
    if (token === "" || (limit !== undefined && all.length >= limit)) break;
  }
  const out = entries(first);
  out.splice(0, out.length, ...all.slice(0, limit ?? all.length));
  first.nextPageToken = token;
  return first;
}

export function listAllNodes(a: Pick<Client<typeof AdminService>, "listNodes">, req: Omit<Partial<ListNodesRequest>, "$typeName" | "pageSize" | "pageToken">, limit: number | undefined, timeoutMs: () => number): Promise<ListNodesResponse> {
  return allPages(limit, (pageSize, pageToken) => a.listNodes({ ...req, pageSize, pageToken }, { timeoutMs: timeoutMs() }), (r) => r.nodes);
}

export function listAllModels(a: Pick<Client<typeof AdminService>, "listModels">, req: Omit<Partial<ListModelsRequest>, "$typeName" | "pageSize" | "pageToken">, limit: number | undefined, timeoutMs: () => number): Promise<ListModelsResponse> {
  return allPages(limit, (pageSize, pageToken) => a.listModels({ ...req, pageSize, pageToken }, { timeoutMs: timeoutMs() }), (r) => r.instances);
}

/**
 * ExplainPlacement's verdicts, every page (or up to `limit`), under the first
 * page's decision and counts: each call weighs every node, so the pages of a
 * cluster that changes meanwhile may come from slightly different moments.
 */
export function explainAllPages(a: Pick<Client<typeof AdminService>, "explainPlacement">, req: Omit<Partial<ExplainPlacementRequest>, "$typeName" | "pageSize" | "pageToken">, limit: number | undefined, timeoutMs: () => number): Promise<ExplainPlacementResponse> {
  return allPages(limit, (pageSize, pageToken) => a.explainPlacement({ ...req, pageSize, pageToken }, { timeoutMs: timeoutMs() }), (r) => r.nodes);
}
