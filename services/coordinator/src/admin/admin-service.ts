import type { MessageInitShape } from "@bufbuild/protobuf";
import type { AdminService } from "@warden/proto";
import {
  NodeState,
  UnloadOutcome,
} from "@warden/proto";
import type { GetHaStatusResponseSchema } from "@warden/proto";
import type { HandlerContext, ServiceImpl } from "@warden/grpc";
import {
  Code,
  WardenError,
  durationMsFromUint64,
  invalidArgument,
  maxOperationTimeoutMs,
  maxWatchEventTypes,
  type Clock,
} from "@warden/common";
import { parseEventType, validateEventFilter } from "@warden/events";
import type { Loader } from "@warden/loader";
import { applyPolicyPatch, type InstanceView } from "@warden/watchdog";
import { validateScale } from "@warden/loader";
import type { BackendClientHandle } from "../routing/backend-connector.js";
import { checkId } from "./check-id.js";
import { instanceLogs } from "./instance-logs.js";
import { installBackendBundle, listBackendBundles, removeBackendBundle, type BackendBundleDeps } from "./backend-bundles.js";
import type { EventHub } from "./event-hub.js";
import { explainPageOf, explainPlacement } from "./explain-placement.js";
import { startDrain } from "./start-drain.js";
import type { NodeRecord, NodeRegistry } from "../nodes/node-registry.js";
import type { PlacementView } from "./placement-view.js";
import { modelTables, policyChanges, policyPatchOf } from "./policy-patch.js";
import { watchCallerOf } from "../auth/watch-caller.js";
import { applySetNodeLimits, checkScaleModel, checkSetNodeLimits, modelReplicasInit, nodeLimitFields, replicaSummaries } from "./replica-admin.js";
import { lostPlaceholder, modelInstance, nodeInit, nodeStateOf, policyInit, type ModelInstanceInit, type NodeInit, type OutageView } from "./admin-messages.js";
import { instanceCountOn, instancesOnNode, listModelsPage, listNodesPage, type ListingDeps } from "./admin-listings.js";
import { inMemorySettings, type SettingsWriter } from "../ha/durable-settings.js";
import { policyKey, type PolicyValue } from "../ha/settings-values.js";
import type { TakeoverSettings } from "../ha/takeover-settings.js";
import type { NodesKnownAtStart } from "../nodes/nodes-known-at-start.js";
import { heartbeatTurnBudgetMs } from "../nodes/node-service.js";
import { declareUnregisteredLost, knownNodeView, unconfirmedOn } from "./known-node-view.js";


export interface AdminDeps {
  readonly clock: Clock;
  readonly loader: Loader<BackendClientHandle>;
  readonly nodes: NodeRegistry;
  readonly hub: EventHub;
  readonly placement: PlacementView;
  readonly enforcement: { readonly maxAttempts: number; readonly intervalMs: number };
  readonly defaultStopTimeoutMs: number;
  /** GetHaStatus's answer (HA runner); without it: `enabled: false` (single machine). */
  readonly haStatus?: () => MessageInitShape<typeof GetHaStatusResponseSchema>;
  /**
   * Where drains, lost nodes, forgotten instances, policy, scale and node
   * limits are written before they apply (ha/durable-settings.ts; HA's
   * bucket or the single coordinator's file in its state dir).
   * @default inMemorySettings (nothing kept: applied at once)
   */
  readonly settings?: SettingsWriter;
  /** What the store said at start or takeover (lost nodes not registered yet, the merged policy). */
  readonly takeover?: TakeoverSettings;
  /** Instances serving through their agent's outage (nodes/outage-serving.ts). @default none */
  readonly outage?: OutageView;
  /** Nodes known before the start that have not registered since (ListNodes, GetNode show them). */
  readonly knownAtStart?: NodesKnownAtStart;
  /**
   * HA: throws UNAVAILABLE while this leader may not command agents (lease
   * lost, no quorum). LoadModel and UnloadModel ask first, so a paused leader
   * refuses them with nothing changed, rather than starting a stop whose
   * command it then cannot send (the instance became a leftover).
   */
  readonly requireCommands?: () => void;
  /** HA: the leader epoch stamped on the bundle commands (install, remove), as on StopBackend. @default none (0) */
  readonly commandEpoch?: () => bigint;
  /** HA: an agent refused a bundle command as from an older leader epoch. */
  readonly onStaleEpoch?: BackendBundleDeps["onStaleEpoch"];
  /** Who made a call (admin-actor.ts), stamped on the events of the loads and stops it asks for; absent = not recorded. */
  readonly actorOf?: (ctx: HandlerContext) => string;
  /** ExplainPlacement's longest run without yielding to the event loop (heartbeats, leases). @default heartbeatTurnBudgetMs (10) */
  readonly explainSliceMs?: number;
  /** ExportTrace's source (trace/workload-trace.ts); absent = the trace is off (NOT_FOUND). */
  readonly exportTrace?: (sinceWallMs: number, signal: AbortSignal) => AsyncIterable<Uint8Array>;
}

/** Longer than any event type name; a longer one is refused without echoing it back. */
const maxEventTypeLength = 64;

/** AdminService (DESIGN §4). */
export function adminService(d: AdminDeps): ServiceImpl<typeof AdminService> {
  const settings = d.settings ?? inMemorySettings;
  const nodeOf = (nodeId: string): NodeRecord => {
    const n = d.nodes.get(checkId(nodeId, "node_id"));
    if (n === undefined) throw new WardenError(Code.NotFound, `node_id: node "${nodeId}" is not registered`);
    return n;
  };
  // A node known from before the restart and not registered since: NOT_REPORTED (UNSPECIFIED: not known at all).
  const stateOfNode = (nodeId: string): NodeState => {
    const n = d.nodes.get(nodeId);
    if (n === undefined && d.knownAtStart?.stateOf(nodeId) === "not-reported") return NodeState.NOT_REPORTED;
    return n === undefined && d.takeover?.lostUnregistered.has(nodeId) === true ? NodeState.LOST : nodeStateOf(n);
  };
  // Every node this service shows carries its placement limits (agent's, override, effective).
  const nodeView = (n: NodeRecord, instanceCount: number, drainRemaining: number): NodeInit => nodeInit(n, instanceCount, drainRemaining, nodeLimitFields(d.nodes, n.nodeId), d.outage?.servingOn(n.nodeId));
  const instanceOf = (v: InstanceView): ModelInstanceInit => modelInstance(d, v, stateOfNode(v.nodeId));
  const listing: ListingDeps = {
    clock: d.clock,
    loader: d.loader,
    nodes: d.nodes,
    ...(d.takeover === undefined ? {} : { lostUnregistered: () => (d.takeover as TakeoverSettings).lostUnregistered.keys() }),
    // Nodes known from before the restart that have not registered since: listed as not reported (or lost).
    knownIds: () => d.knownAtStart?.ids() ?? [],
    unregisteredView: (id) => {
      const st = d.knownAtStart?.stateOf(id);
      return st === undefined ? undefined : knownNodeView(d, id, st, instanceCountOn(d, id));
    },
    nodeStateOf: stateOfNode,
    ...(d.outage === undefined ? {} : { outage: d.outage }),
    nodeView: (n, c) => nodeView(n, c, n.draining ? c : 0),
  };

  const bundleDeps = (ctx: HandlerContext): BackendBundleDeps => {
    const { actorOf, ...rest } = d;
    return { ...rest, actor: actorOf?.(ctx) };
  };

  return {
    async listNodes(req) {
      return listNodesPage(listing, req);
    },
    async getNode(req) {
      const unregistered = d.nodes.get(checkId(req.nodeId, "node_id")) === undefined ? d.knownAtStart?.stateOf(req.nodeId) : undefined;
      if (unregistered !== undefined) return { node: knownNodeView(d, req.nodeId, unregistered, instanceCountOn(d, req.nodeId)), instances: [...instancesOnNode(listing, req.nodeId), ...unconfirmedOn(d, req.nodeId)] };
      const n = nodeOf(req.nodeId);
      const c = instanceCountOn(d, n.nodeId);
      return { node: nodeView(n, c, n.draining ? c : 0), instances: instancesOnNode(d, n.nodeId) };
    },
    async drainNode(req, ctx) {
      const actor = d.actorOf?.(ctx);
      const view = (n: NodeRecord): { node: NodeInit } => {
        const c = instanceCountOn(d, n.nodeId);
        return { node: nodeView(n, c, c) };
      };
      return await settings.change("drain", checkId(req.nodeId, "node_id"), () => {
        const n = nodeOf(req.nodeId);
        if (n.draining) return { t: "none", result: () => view(n) };
        return {
          t: "put",
          value: { force: req.force, sinceWallMs: d.clock.wallNow(), ...(actor === undefined ? {} : { actor }) },
          apply: () => {
            if (!n.draining) {
              n.draining = true;
              startDrain(d, n, { force: req.force, actor });
            }
            return view(n);
          },
        };
      });
    },
    async undrainNode(req, ctx) {
      const actor = d.actorOf?.(ctx);
      return await settings.change("drain", checkId(req.nodeId, "node_id"), () => {
        const n = nodeOf(req.nodeId);
        return {
          t: "remove",
          apply: () => {
            const was = n.draining;
            n.draining = false;
            d.takeover?.undrained(n.nodeId);
            if (was) void d.hub.publish({ nodeId: n.nodeId, ...(actor === undefined ? {} : { actor }), payload: { case: "nodeUndrained", value: { $typeName: "warden.v1.NodeUndrained" } } });
            return { node: nodeView(n, instanceCountOn(d, n.nodeId), 0) };
          },
        };
      });
    },
    async declareNodeLost(req, ctx) {
      const nodeId = checkId(req.nodeId, "node_id");
      const view = (n: NodeRecord, wasAlreadyLost: boolean): { node: NodeInit; wasAlreadyLost: boolean } => {
        const c = instanceCountOn(d, n.nodeId);
        return { node: nodeView(n, c, n.draining ? c : 0), wasAlreadyLost };
      };
      // Every check comes before the one change, in the same turn (again after
      // the store's acknowledgement): a refused call leaves the node as it was.
      const check = (): NodeRecord | "lost" => {
        const n = nodeOf(nodeId);
        if (n.state === "lost") return "lost";
        if (n.embedded) {
          throw new WardenError(Code.FailedPrecondition, `node_id: node "${n.nodeId}" is the coordinator's embedded agent: it runs inside the coordinator and cannot be lost apart from it (drain it to empty it)`);
        }
        if (n.state === "ready") {
          throw new WardenError(Code.FailedPrecondition, `node_id: node "${n.nodeId}" is ready (heartbeating): only an unreachable node can be declared lost; to empty a healthy node, drain it`);
        }
        return n;
      };
      const reason = req.reason.slice(0, 1024);
      return await settings.change("lost-node", nodeId, () => {
        // HA: lost in the store and not registered with this leader since.
        if (d.nodes.get(nodeId) === undefined && d.takeover?.lostUnregistered.has(nodeId) === true) return { t: "none", result: () => ({ node: lostPlaceholder(nodeId), wasAlreadyLost: true }) };
        // Known from before a restart and not registered since: the operator need not wait for the node-lost timeout.
        const unregistered = d.nodes.get(nodeId) === undefined ? declareUnregisteredLost(d, nodeId, reason, d.actorOf?.(ctx)) : undefined;
        if (unregistered !== undefined) return unregistered;
        const first = check();
        if (first === "lost") return { t: "none", result: () => view(nodeOf(nodeId), true) };
        return {
          t: "put",
          value: { reason, atWallMs: d.clock.wallNow() },
          apply: () => {
            // Heard from during the write: the declaration is over (its entry is removed behind this call).
            const n = check();
            if (n === "lost") return view(nodeOf(nodeId), true);
            // Unreachable. An operator's word is not subject to the mass-unreachability
            // pause (that pause holds back only the timeout path in checkHealth).
            d.nodes.declareLost(n, true, reason);
            return view(n, false);
          },
        };
      });
    },
    async listModels(req) {
      const page = listModelsPage(listing, req);
      // The configured models and their replicas (bounded by the config) come with the first page.
      if (req.pageToken !== "") return page;
      return {
        ...page,
        configured: d.loader.modelSpecs().map((m) => ({ model: m.id, backend: m.backend, groups: [...m.groups], pinned: m.pinned, sizeBytes: BigInt(m.sizeBytes) })),
        replicas: replicaSummaries(d.loader, d.clock),
      };
    },
    async loadModel(req, ctx) {
      checkId(req.model, "model");
      if (req.nodeId !== "") nodeOf(req.nodeId);
      d.requireCommands?.();
      const h = await d.loader.ensureLoaded(req.model, ctx.signal, req.nodeId === "" ? undefined : req.nodeId, d.actorOf?.(ctx));
      const v = d.loader.core.instance(h.incarnation);
      if (v === undefined) throw new WardenError(Code.Aborted, `model "${req.model}" was unloaded while loading`);
      return { instance: instanceOf(v) };
    },
    async unloadModel(req, ctx) {
      checkId(req.model, "model");
      const stopTimeoutMs = req.stopTimeoutMs === 0n ? d.defaultStopTimeoutMs : durationMsFromUint64(req.stopTimeoutMs, "stop_timeout_ms", maxOperationTimeoutMs);
      if (d.loader.modelSpec(req.model) === undefined && d.nodes.findModel(req.model).t === "absent") {
        throw new WardenError(Code.NotFound, `model: "${req.model}" is neither configured nor loaded`);
      }
      d.requireCommands?.();
      const actor = d.actorOf?.(ctx);
      const r = await d.loader.unload(req.model, { force: req.force, stopTimeoutMs, ...(actor === undefined ? {} : { actor }) });
      switch (r.t) {
        case "stopped":
          return { outcome: UnloadOutcome.STOPPED };
        case "registered-again": {
          const v = d.loader.core.instance(r.incarnation);
          return { outcome: UnloadOutcome.REGISTERED_AGAIN, error: r.error, ...(v === undefined ? {} : { instance: instanceOf(v) }) };
        }
        case "leftover":
          return { outcome: UnloadOutcome.LEFTOVER, error: r.error };
        case "not-loaded":
          return { outcome: UnloadOutcome.NOT_LOADED };
      }
    },
    async forgetInstance(req) {
      checkId(req.nodeId, "node_id");
      checkId(req.incarnation, "incarnation");
      if (req.operator === "") throw invalidArgument("operator", "is required: forgetting an instance is an audited decision");
      const operator = req.operator.slice(0, 256);
      const note = req.note.slice(0, 1024);
      const notFound = (): WardenError => new WardenError(Code.NotFound, `incarnation: "${req.incarnation}" is not known on node "${req.nodeId}"`);
      return await settings.change("forgotten", req.incarnation, () => {
        const known = (d.loader.knows(req.incarnation) && !d.loader.isGone(req.incarnation)) || d.loader.journalReplicas.list().some((u) => u.incarnation === req.incarnation);
        // HA: refused before anything is written (single machine: the loader's own answer, as before).
        if (!known && d.takeover !== undefined) throw notFound();
        const atWallMs = d.clock.wallNow();
        return {
          t: "put",
          value: { nodeId: req.nodeId, operator, note, atWallMs },
          apply: () => {
            // Gone meanwhile (reaped, exited): what the operator wanted holds either way.
            if (!d.loader.forget(req.incarnation, operator, note) && d.takeover === undefined) throw notFound();
            d.takeover?.forgottenApplied(req.incarnation, atWallMs);
            return {};
          },
        };
      });
    },
    async getPolicy() {
      return { policy: policyInit(d.loader, d.enforcement) };
    },
    async updatePolicy(req, ctx) {
      const p = req.patch;
      if (p === undefined) throw invalidArgument("patch", "is required");
      const actor = d.actorOf?.(ctx);
      const { policy, changes } = await settings.change("policy", policyKey, () => {
        const { patch, models } = policyPatchOf(p, d.loader);
        // Dry run of the whole change (scalars and the resulting pin/group
        // tables) through the watchdog's own validator: whatever it would refuse
        // is refused here, before the first of the applies below changes anything.
        applyPolicyPatch(d.loader.getPolicy(), { ...patch, ...modelTables(d.loader, models) }, d.loader.core.caps);
        // What the store keeps: every API change so far, merged (the config file's policy is the base).
        const before = d.takeover?.policy ?? { patch: {}, models: {} };
        const merged: PolicyValue = {
          patch: { ...before.patch, ...patch },
          models: { ...Object.fromEntries(Object.entries(before.models).filter(([m]) => d.loader.modelSpec(m) !== undefined)), ...Object.fromEntries(models.map((m) => [m.model, { pinned: m.pinned, groups: m.groups }])) },
        };
        return {
          t: "put",
          value: merged,
          apply: () => {
            d.loader.updatePolicy(patch);
            // A model a reload removed meanwhile has no pin to change.
            for (const m of models) if (d.takeover === undefined || d.loader.modelSpec(m.model) !== undefined) d.loader.patchModel(m.model, { pinned: m.pinned, groups: m.groups });
            d.takeover?.policyApplied(merged);
            return { policy: policyInit(d.loader, d.enforcement), changes: policyChanges({ patch, models: Object.fromEntries(models.map((m) => [m.model, m])) }) };
          },
        };
      });
      // The reply waits for the journaled event, as SetNodeLimits' does.
      await d.hub.publish({ ...(actor === undefined ? {} : { actor }), payload: { case: "policyUpdated", value: { $typeName: "warden.v1.PolicyUpdated", changes } } });
      return { policy };
    },
    async explainPlacement(req, ctx) {
      checkId(req.model, "model");
      const page = explainPageOf(req);
      const spec = d.loader.modelSpec(req.model);
      if (spec === undefined) throw new WardenError(Code.NotFound, `model: "${req.model}" is not configured`);
      // For the next replica, with the model's scale-up circuit breaker when open; stops with
      // the caller, and yields after each slice so heartbeats keep flowing on a large cluster. A
      // slice is as long as a turn of heartbeats: on a loop full of them each yield waits out a
      // long turn, so an explanation of a few tens of ms takes a few turns, not one per 5 ms.
      const slicing = { signal: ctx.signal, sliceMs: d.explainSliceMs ?? heartbeatTurnBudgetMs, nowMs: () => performance.now() };
      return await explainPlacement({ core: d.loader.core, placement: d.placement, nowMs: d.clock.now(), slicing }, spec, d.loader.replicaStatus(req.model)?.blocked, page);
    },
    async scaleModel(req, ctx) {
      const actor = d.actorOf?.(ctx);
      const { patch, operator } = checkScaleModel(req);
      return await settings.change("scale", req.model, () => {
        const spec = d.loader.modelSpec(req.model);
        // Whole, before the write: the loader's own check (NOT_FOUND, min/max bounds).
        const next = validateScale(spec, req.model, patch);
        const configReplicas = spec === undefined ? next : (d.takeover?.scaleConfigOf(req.model, spec.replicas) ?? spec.replicas);
        return {
          t: "put",
          value: { min: next.min, max: next.max, configReplicas, operator },
          apply: () => {
            // The loader validates against the model's settings whole, applies, and audits it (replica.scale-set).
            d.loader.scale(req.model, patch, operator, actor);
            d.takeover?.scaleApplied(req.model, configReplicas);
            const status = d.loader.replicaStatus(req.model);
            return status === undefined ? {} : { replicas: modelReplicasInit(status, d.clock.now()) };
          },
        };
      });
    },
    async getHaStatus() {
      return d.haStatus?.() ?? { enabled: false };
    },
    async setNodeLimits(req, ctx) {
      const actor = d.actorOf?.(ctx);
      const { node, audit } = await settings.change("node-limits", checkId(req.nodeId, "node_id"), () => {
        const next = checkSetNodeLimits(req, d.nodes);
        const change = (): { node: NodeInit; audit: ReturnType<typeof applySetNodeLimits> } => {
          const audit = applySetNodeLimits(req, d.nodes);
          const n = nodeOf(req.nodeId);
          const c = instanceCountOn(d, n.nodeId);
          // The view is taken in the same turn as the change; the reply waits for the journaled event.
          return { node: nodeView(n, c, n.draining ? c : 0), audit };
        };
        return next.maxReplicasPerModel === undefined && next.memoryBudget === undefined ? { t: "remove", apply: change } : { t: "put", value: next, apply: change };
      });
      await d.hub.publish(actor === undefined ? audit : { ...audit, actor });
      return { node };
    },
    async getInstanceLogs(req, ctx) {
      return instanceLogs(d, req, ctx.signal);
    },
    async listBackendBundles(req, ctx) {
      return listBackendBundles(d, req, ctx.signal);
    },
    async installBackendBundle(req, ctx) {
      return installBackendBundle(bundleDeps(ctx), req, ctx.signal);
    },
    async removeBackendBundle(req, ctx) {
      return removeBackendBundle(bundleDeps(ctx), req, ctx.signal);
    },
    async *exportTrace(req, ctx) {
      if (d.exportTrace === undefined) throw new WardenError(Code.NotFound, "no workload trace: trace.enabled is false in this coordinator's config");
      for await (const data of d.exportTrace(Number(req.sinceUnixMs), ctx.signal)) yield { data };
    },
    async *watchEvents(req, ctx) {
      // Same rules as every other identifier: a filter that can never match
      // (or a huge list to scan per event) is a client error, not an empty stream.
      if (req.types.length > maxWatchEventTypes) throw invalidArgument("types", `at most ${String(maxWatchEventTypes)} event types, got ${String(req.types.length)}`);
      const types = req.types.map((t, i) => {
        const field = `types[${String(i)}]`;
        if (t.length > maxEventTypeLength) throw invalidArgument(field, `unknown event type (${String(t.length)} characters)`);
        return parseEventType(t, field);
      });
      if (req.nodeId !== "") checkId(req.nodeId, "node_id");
      if (req.model !== "") checkId(req.model, "model");
      const filter = validateEventFilter({ types, ...(req.nodeId === "" ? {} : { nodeId: req.nodeId }), ...(req.model === "" ? {} : { model: req.model }) }, maxWatchEventTypes);
      for await (const event of d.hub.watch(filter, ctx.signal, undefined, watchCallerOf(ctx))) yield { event };
    },
  };
}
