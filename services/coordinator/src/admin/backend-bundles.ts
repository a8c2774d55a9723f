import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, WardenError, durationMsFromUint64, invalidArgument, maxOperationTimeoutMs } from "@warden/common";
import type {
  BackendBundleResultSchema,
  BackendBundleSchema,
  BundleInfo,
  InstallBackendBundleRequest,
  ListBackendBundlesRequest,
  ListBackendBundlesResponseSchema,
  NodeBackendBundlesSchema,
  RemoveBackendBundleRequest,
} from "@warden/proto";
import type { Loader } from "@warden/loader";
import type { BackendClientHandle } from "../routing/backend-connector.js";
import type { NodeRecord, NodeRegistry } from "../nodes/node-registry.js";
import { typedRefusal, type StaleEpochListener } from "../nodes/agent-port.js";
import type { EventHub } from "./event-hub.js";
import { checkId } from "./check-id.js";

type NodeBundlesInit = MessageInitShape<typeof NodeBackendBundlesSchema>;
type ResultInit = MessageInitShape<typeof BackendBundleResultSchema>;

export interface BackendBundleDeps {
  readonly loader: Loader<BackendClientHandle>;
  readonly nodes: NodeRegistry;
  readonly hub: EventHub;
  /** HA: throws UNAVAILABLE while this leader may not command agents; asked before anything is sent. */
  readonly requireCommands?: () => void;
  /** The leader epoch stamped on every install and remove, as on StopBackend. @default () => 0n (no HA) */
  readonly commandEpoch?: () => bigint;
  /** An agent refused a command as from an older leader epoch (the HA runner steps down). */
  readonly onStaleEpoch?: StaleEpochListener;
  /** Who asked (admin-actor.ts), stamped on the audit events; absent = not recorded. */
  readonly actor?: string | undefined;
}

/** Per-node answer deadlines (ms): a list is a read; an install pulls an image. */
const listTimeout = { dflt: 5_000, max: 60_000 };
const installTimeout = { dflt: 600_000, max: maxOperationTimeoutMs };
const removeTimeout = { dflt: 60_000, max: maxOperationTimeoutMs };
/** Agents asked at once: a large cluster is walked in waves, never thousands of open calls. */
const fanOutWidth = 16;
/** An agent's catalog bound: more bundles from one node are cut. */
const maxBundlesPerNode = 256;
const maxSelectorPairs = 32;
const maxLabelChars = 256;
/** An agent's error as the answer carries it. */
const maxErrorChars = 1_024;

function timeoutOf(v: bigint, b: { readonly dflt: number; readonly max: number }): number {
  return v === 0n ? b.dflt : durationMsFromUint64(v, "timeout_ms", b.max, 1);
}

function bundleOf(b: BundleInfo): MessageInitShape<typeof BackendBundleSchema> {
  return { backend: b.backend, source: b.source, sha256: b.sha256, installed: b.installed, running: b.running };
}

function failure(err: unknown): { error: string; code: number } {
  const e = WardenError.from(err);
  return { error: e.rawMessage.slice(0, maxErrorChars), code: e.code };
}

/** Why a node that is not ready is not asked (it is named in the answer, never left out). */
function notReady(n: NodeRecord): { error: string; code: number } | undefined {
  if (n.state === "ready") return undefined;
  return { error: `node "${n.nodeId}" is ${n.state}: its agent was not asked`, code: Code.Unavailable };
}

/** Runs `f` over `items` at most `fanOutWidth` at a time; results in item order. */
async function fanOut<T, R>(items: readonly T[], f: (t: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      out[i] = await f(items[i] as T);
    }
  };
  await Promise.all(Array.from({ length: Math.min(fanOutWidth, items.length) }, worker));
  return out;
}

const byId = (a: NodeRecord, b: NodeRecord): number => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0);

function nodeOf(d: Pick<BackendBundleDeps, "nodes">, nodeId: string): NodeRecord {
  const n = d.nodes.get(checkId(nodeId, "node_id"));
  if (n === undefined) throw new WardenError(Code.NotFound, `node_id: node "${nodeId}" is not registered`, { details: { field: "node_id" } });
  return n;
}

/** ListBackendBundles: every targeted node's bundles, or why it has none to show. */
export async function listBackendBundles(d: Pick<BackendBundleDeps, "nodes">, req: ListBackendBundlesRequest, signal: AbortSignal): Promise<MessageInitShape<typeof ListBackendBundlesResponseSchema>> {
  const timeoutMs = timeoutOf(req.timeoutMs, listTimeout);
  const targets = req.nodeId === "" ? [...d.nodes.list()].sort(byId) : [nodeOf(d, req.nodeId)];
  const nodes = await fanOut(targets, async (n): Promise<NodeBundlesInit> => {
    const down = notReady(n);
    if (down !== undefined) return { nodeId: n.nodeId, ...down };
    try {
      const r = await n.client.listBundles({}, { signal, timeoutMs });
      return { nodeId: n.nodeId, bundles: r.bundles.slice(0, maxBundlesPerNode).map(bundleOf) };
    } catch (err) {
      return { nodeId: n.nodeId, ...failure(err) };
    }
  });
  return { nodes };
}

type Target = Pick<InstallBackendBundleRequest, "backend" | "nodeId" | "selector" | "allNodes">;

/** The nodes one install or remove is for; INVALID_ARGUMENT / NOT_FOUND before anything is sent. */
function targetsOf(d: BackendBundleDeps, req: Target): NodeRecord[] {
  const backend = checkId(req.backend, "backend");
  const pairs = Object.entries(req.selector);
  const given = [req.nodeId !== "", pairs.length > 0, req.allNodes].filter(Boolean).length;
  if (given !== 1) throw invalidArgument("node_id", `name exactly one target: node_id, selector or all_nodes (got ${String(given)})`);
  if (pairs.length > maxSelectorPairs) throw invalidArgument("selector", `at most ${String(maxSelectorPairs)} label pairs, got ${String(pairs.length)}`);
  for (const [k, v] of pairs) if (k === "" || k.length > maxLabelChars || v.length > maxLabelChars) throw invalidArgument("selector", `label keys are 1..${String(maxLabelChars)} characters and values at most ${String(maxLabelChars)}`);
  if (req.nodeId !== "") {
    const n = nodeOf(d, req.nodeId);
    if (!n.backends.has(backend)) throw invalidArgument("backend", `"${backend}" is not in the catalog node "${n.nodeId}" registered with`);
    return [n];
  }
  const out = d.nodes.list().filter((n) => n.backends.has(backend) && pairs.every(([k, v]) => n.labels[k] === v));
  if (out.length === 0) throw invalidArgument("backend", `no registered node${pairs.length > 0 ? " matching the selector" : ""} has "${backend}" in its catalog`);
  return out.sort(byId);
}

/** An instance of a model using `backend` on one of `nodes`, held or still being stopped: the first, to name in a refusal. */
function userOf(d: BackendBundleDeps, backend: string, nodes: readonly NodeRecord[]): string | undefined {
  const usesIt = (model: string): boolean => d.loader.modelSpec(model)?.backend === backend;
  for (const n of nodes) {
    for (const v of d.loader.core.instancesOnNode(n.nodeId)) if (usesIt(v.model)) return `instance ${v.incarnation} of model "${v.model}" (${v.state}) on node "${n.nodeId}"`;
    for (const l of d.loader.leftoversOn(n.nodeId)) if (usesIt(l.model)) return `instance ${l.incarnation} of model "${l.model}" (being stopped) on node "${n.nodeId}"`;
  }
  return undefined;
}

function publishOf(d: BackendBundleDeps, nodeId: string, kind: "installed" | "removed", b: { readonly backend: string; readonly sha256: string; readonly source: string }): Promise<unknown> {
  const actor = d.actor;
  const value = { backend: b.backend, sha256: b.sha256, source: b.source };
  const payload = kind === "installed"
    ? { case: "backendInstalled" as const, value: { $typeName: "warden.v1.BackendInstalled" as const, ...value, startIncarnation: "" } }
    : { case: "backendRemoved" as const, value: { $typeName: "warden.v1.BackendRemoved" as const, ...value } };
  return d.hub.publish({ nodeId, ...(actor === undefined ? {} : { actor }), payload });
}

/** InstallBackendBundle: each targeted agent installs the bundle its own catalog names. */
export async function installBackendBundle(d: BackendBundleDeps, req: InstallBackendBundleRequest, signal: AbortSignal): Promise<{ results: ResultInit[] }> {
  const timeoutMs = timeoutOf(req.timeoutMs, installTimeout);
  const targets = targetsOf(d, req);
  d.requireCommands?.();
  const results = await fanOut(targets, async (n): Promise<ResultInit> => {
    const down = notReady(n);
    if (down !== undefined) return { nodeId: n.nodeId, ...down };
    try {
      const r = await n.client.installBundle({ backend: req.backend, leaderEpoch: d.commandEpoch?.() ?? 0n }, { signal, timeoutMs }).catch((err: unknown) => {
        throw typedRefusal(err, d.onStaleEpoch);
      });
      const b = r.bundle;
      if (b === undefined) throw new WardenError(Code.Internal, "agent answered InstallBundle without its bundle");
      // Audited only when something was installed; the reply waits for the journaled event.
      if (!r.alreadyInstalled) await publishOf(d, n.nodeId, "installed", b);
      return { nodeId: n.nodeId, bundle: bundleOf(b), alreadyInstalled: r.alreadyInstalled };
    } catch (err) {
      return { nodeId: n.nodeId, ...failure(err) };
    }
  });
  return { results };
}

/** RemoveBackendBundle: refused whole while an instance using the backend lives on a targeted node. */
export async function removeBackendBundle(d: BackendBundleDeps, req: RemoveBackendBundleRequest, signal: AbortSignal): Promise<{ results: ResultInit[] }> {
  const timeoutMs = timeoutOf(req.timeoutMs, removeTimeout);
  const targets = targetsOf(d, req);
  const user = userOf(d, req.backend, targets);
  if (user !== undefined) throw new WardenError(Code.FailedPrecondition, `backend "${req.backend}" is in use by ${user}: unload it first; nothing was removed`, { details: { field: "backend" } });
  d.requireCommands?.();
  const results = await fanOut(targets, async (n): Promise<ResultInit> => {
    const down = notReady(n);
    if (down !== undefined) return { nodeId: n.nodeId, ...down };
    try {
      // What the node's catalog names (source, digest), for the audit event: asked first, a read.
      const listed = (await n.client.listBundles({}, { signal, timeoutMs })).bundles.find((b) => b.backend === req.backend);
      const r = await n.client.removeBundle({ backend: req.backend, leaderEpoch: d.commandEpoch?.() ?? 0n }, { signal, timeoutMs }).catch((err: unknown) => {
        throw typedRefusal(err, d.onStaleEpoch);
      });
      if (r.removed) await publishOf(d, n.nodeId, "removed", listed ?? { backend: req.backend, sha256: "", source: "" });
      return { nodeId: n.nodeId, removed: r.removed, ...(listed === undefined ? {} : { bundle: { ...bundleOf(listed), installed: false } }) };
    } catch (err) {
      return { nodeId: n.nodeId, ...failure(err) };
    }
  });
  return { results };
}
