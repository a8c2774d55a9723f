import { applyPolicyPatch } from "@warden/watchdog";
import type { Clock, Logger } from "@warden/common";
import type { Loader, ModelSpec, ReplicaSettings } from "@warden/loader";
import type { Event } from "@warden/proto";
import type { Outbox, StopIntent } from "@warden/outbox";
import type { BackendClientHandle } from "../routing/backend-connector.js";
import type { EventHub } from "../admin/event-hub.js";
import type { NodeRegistry } from "../nodes/node-registry.js";
import { modelTables, policyChanges } from "../admin/policy-patch.js";
import type { DurableSettings, LoadedSettings } from "./durable-settings.js";
import type { StateSection } from "./durable-state-port.js";
import { parseDrain, parseForgotten, parseLost, parseNodeLimits, parsePolicy, parseScale, policyKey, type DrainValue, type ForgottenValue, type LostValue, type PolicyValue } from "./settings-values.js";

/** Forgotten incarnations kept in the store: at most this many (the oldest go first)… */
export const maxForgotten = 10_000;
/** …and none older than this. */
export const forgottenKeepMs = 24 * 3_600_000;

export interface TakeoverSettingsDeps {
  readonly loader: Loader<BackendClientHandle>;
  readonly nodes: NodeRegistry;
  readonly hub: EventHub;
  readonly outbox: Outbox;
  readonly clock: Clock;
  readonly log: Logger;
  readonly settings: DurableSettings;
  /** Starts a drain's work on a registered node (the Admin service's DrainNode path), audited as resumed. */
  readonly startDrain: (nodeId: string, drain: DrainValue) => void;
}

function sameReplicas(a: ReplicaSettings, b: ReplicaSettings): boolean {
  return a.min === b.min && a.max === b.max && a.targetInFlight === b.targetInFlight && a.scaleDownAfterMs === b.scaleDownAfterMs;
}

/**
 * What the store said at takeover and what of it still waits for a node
 * (HA only; one owner: the coordinator's event loop, every method runs in
 * one turn). The rules, per section:
 *
 * - drain: a drained node is drained the moment it registers (placement
 *   skips it from then), and the drain's work (moves, stops) runs again
 *   once its first inventory has been reconciled.
 * - lost-node: a declaration holds until the node is heard from again — the
 *   same rule as one leader's (a lost node that heartbeats is ready). At
 *   takeover the journal's replicas on it stop counting at once (its
 *   models may be placed elsewhere) and ListNodes shows it lost while it
 *   has not registered; when it registers (or a lost node heartbeats) the
 *   declaration is over and its entry is removed.
 * - forgotten: open stop intents and journal replicas of a forgotten
 *   incarnation are not restored (the intent is cleared, the journal gets
 *   its instance.forgotten again). A node's inventory that still reports it
 *   running is the truth, as on one leader: it is adopted.
 * - policy, scale, node-limits: applied over the config before admission.
 */
export class TakeoverSettings {
  private readonly drainAtRegistration = new Map<string, DrainValue>();
  private readonly drainAtInventory = new Map<string, DrainValue>();
  /** Declared lost in the store and not registered with this coordinator (ListNodes shows them lost). */
  readonly lostUnregistered = new Map<string, LostValue>();
  /** Incarnation → when it was forgotten; insertion order is age order (restored sorted). */
  private readonly forgotten = new Map<string, number>();
  private readonly forgottenAtStart = new Map<string, ForgottenValue>();
  /** The config's replicas each ScaleModel override was made against. */
  private readonly scaleConfig = new Map<string, ReplicaSettings>();
  private policyValue: PolicyValue = { patch: {}, models: {} };
  private loadedPolicy: PolicyValue | undefined;

  constructor(
    private readonly d: TakeoverSettingsDeps,
    private readonly loaded: LoadedSettings,
  ) {
    const nowWall = d.clock.wallNow();
    const forgotten: [string, ForgottenValue][] = [];
    for (const [id, e] of this.section("forgotten")) {
      const v = parseForgotten(e.value);
      if (v === undefined) this.skip("forgotten", id);
      else if (nowWall - v.atWallMs > forgottenKeepMs) d.settings.drop("forgotten", id, "older than 24 h");
      else forgotten.push([id, v]);
    }
    forgotten.sort((a, b) => a[1].atWallMs - b[1].atWallMs);
    for (const [id] of forgotten.slice(0, Math.max(0, forgotten.length - maxForgotten))) d.settings.drop("forgotten", id, `beyond the cap of ${String(maxForgotten)}`);
    for (const [id, v] of forgotten.slice(-maxForgotten)) {
      this.forgotten.set(id, v.atWallMs);
      this.forgottenAtStart.set(id, v);
    }
    for (const [id, e] of this.section("drain")) {
      const v = parseDrain(e.value);
      if (v === undefined) this.skip("drain", id);
      else this.drainAtRegistration.set(id, v);
    }
    for (const [id, e] of this.section("lost-node")) {
      const v = parseLost(e.value);
      if (v === undefined) this.skip("lost-node", id);
      else this.lostUnregistered.set(id, v);
    }
    const p = this.section("policy").get(policyKey);
    if (p !== undefined) {
      this.loadedPolicy = parsePolicy(p.value);
      if (this.loadedPolicy === undefined) this.skip("policy", policyKey);
    }
  }

  private section(s: StateSection): ReadonlyMap<string, { readonly value: unknown; readonly revision: number }> {
    return this.loaded.get(s) ?? new Map();
  }

  private skip(section: StateSection, id: string): void {
    this.d.log.warn("durable setting not understood: skipped (not applied)", { section, id });
  }

  /** Open stop intents at start, minus forgotten incarnations (whose intents are cleared). */
  async withoutForgottenIntents(intents: readonly StopIntent[]): Promise<StopIntent[]> {
    const out: StopIntent[] = [];
    for (const i of intents) {
      if (!this.forgotten.has(i.incarnation)) out.push(i);
      else await this.d.outbox.clearStopIntent(i.incarnation);
    }
    return out;
  }

  /**
   * The journal's `recovered` instances minus forgotten ones; each of those
   * gets its terminal instance.forgotten journaled again (the old leader may
   * have answered before its own landed), so the journal alone says it.
   */
  async withoutForgottenReplicas(recovered: readonly Event[]): Promise<Event[]> {
    const out: Event[] = [];
    for (const e of recovered) {
      const f = this.forgottenAtStart.get(e.incarnation);
      if (f === undefined) {
        out.push(e);
        continue;
      }
      await this.d.hub.publish({ nodeId: e.nodeId, model: e.model, address: e.address, incarnation: e.incarnation, payload: { case: "instanceForgotten", value: { $typeName: "warden.v1.InstanceForgotten", operator: f.operator, note: f.note } } });
    }
    return out;
  }

  /** At start, after the loader restored the journal: policy, scale, node limits and lost nodes, before admission opens. */
  applyAtStart(): void {
    const { loader, nodes, log, settings } = this.d;
    if (this.loadedPolicy !== undefined) {
      const models = Object.entries(this.loadedPolicy.models).filter(([m]) => loader.modelSpec(m) !== undefined);
      try {
        this.applyPolicy(this.loadedPolicy);
        this.policyValue = { patch: this.loadedPolicy.patch, models: Object.fromEntries(models) };
      } catch (err) {
        log.error("durable policy refused by this coordinator's validator: the config's policy applies", { err: String(err) });
      }
    }
    for (const [model, e] of this.section("scale")) {
      const v = parseScale(e.value);
      const spec = loader.modelSpec(model);
      if (v === undefined) this.skip("scale", model);
      else if (spec === undefined) continue; // not configured here: kept for a leader whose config has it
      else if (!sameReplicas(spec.replicas, v.configReplicas)) settings.drop("scale", model, "the config changed this model's replicas since: the config wins");
      else {
        try {
          loader.scale(model, { min: v.min, max: v.max }, v.operator);
          this.scaleConfig.set(model, v.configReplicas);
        } catch (err) {
          log.error("durable scale setting refused: the config's replicas apply", { model, err: String(err) });
        }
      }
    }
    for (const [nodeId, e] of this.section("node-limits")) {
      const v = parseNodeLimits(e.value);
      if (v === undefined) this.skip("node-limits", nodeId);
      else nodes.setLimitsOverride(nodeId, v);
    }
    // Before any node registers: the journal's replicas there stop counting now.
    for (const nodeId of this.lostUnregistered.keys()) loader.onNodeLost(nodeId);
    const n = (s: StateSection): number => this.section(s).size;
    log.info("durable settings applied at start", { store: settings.storeName, drain: n("drain"), lostNode: n("lost-node"), forgotten: this.forgotten.size, policy: n("policy"), scale: n("scale"), nodeLimits: n("node-limits") });
  }

  private applyPolicy(p: PolicyValue): void {
    const { loader } = this.d;
    const changes = Object.entries(p.models)
      .filter(([m]) => loader.modelSpec(m) !== undefined)
      .map(([model, m]) => ({ model, pinned: m.pinned, groups: [...m.groups] }));
    // Whole first: a refused value changes nothing.
    applyPolicyPatch(loader.getPolicy(), { ...p.patch, ...modelTables(loader, changes) }, loader.core.caps);
    loader.updatePolicy(p.patch);
    for (const c of changes) loader.patchModel(c.model, { pinned: c.pinned, groups: c.groups });
  }

  /** Nodes the store names (a drain waiting for the node, a limits override): known before this start. */
  nodesNamed(): string[] {
    return [...this.drainAtRegistration.keys(), ...this.section("node-limits").keys()];
  }

  /** A drain kept for a node that has not registered since the start (GetNode of a node not reported yet). */
  drainWaiting(nodeId: string): boolean {
    return this.drainAtRegistration.has(nodeId);
  }

  /** The merged policy the store holds (UpdatePolicy merges its patch into it). */
  get policy(): PolicyValue {
    return this.policyValue;
  }

  /** UpdatePolicy applied `next` (acknowledged by the store). */
  policyApplied(next: PolicyValue): void {
    this.policyValue = next;
  }

  /**
   * SIGHUP: the reloaded config is the new base; the API's policy changes are
   * applied over it again, and a ScaleModel override whose model's replicas
   * the config changed is dropped (the loader drops it the same way).
   */
  afterReload(models: readonly ModelSpec[]): void {
    const { log, nodes } = this.d;
    // Named field by field, so an operator sees which of the file's values do not apply (and why).
    const kept: string[] = [];
    const reset: string[] = [];
    const policyFields = [...policyChanges(this.policyValue)];
    try {
      this.applyPolicy(this.policyValue);
      kept.push(...policyFields.map((f) => `policy ${f}`));
    } catch (err) {
      reset.push(...policyFields.map((f) => `policy ${f} (does not validate over the file: ${String(err)})`));
      log.error("the API's policy changes do not validate over the reloaded config: the config's policy applies", { err: String(err) });
    }
    const byId = new Map(models.map((m) => [m.id, m]));
    for (const [model, configReplicas] of [...this.scaleConfig]) {
      const spec = byId.get(model);
      if (spec !== undefined && sameReplicas(spec.replicas, configReplicas)) {
        const live = this.d.loader.modelSpec(model)?.replicas ?? spec.replicas;
        kept.push(`scale ${model} min=${String(live.min)} max=${String(live.max)}`);
        continue;
      }
      reset.push(`scale ${model} (the file changed its replicas: the file's apply)`);
      this.scaleConfig.delete(model);
      this.d.settings.drop("scale", model, "the reloaded config changed this model's replicas");
    }
    for (const n of nodes.list()) if (n.draining) kept.push(`drain ${n.nodeId}`);
    for (const nodeId of this.drainAtRegistration.keys()) kept.push(`drain ${nodeId} (not reported since the restart)`);
    for (const [nodeId, l] of nodes.limitsOverrides()) kept.push(`limits ${nodeId} ${JSON.stringify(l)}`);
    log.info(reset.length === 0 ? "config reloaded: the operator's live settings are kept over the file" : "config reloaded: some of the operator's live settings were reset to the file's", { kept: kept.slice(0, 256), reset: reset.slice(0, 256) });
  }

  /** The config's replicas a ScaleModel of `model` is made against. */
  scaleConfigOf(model: string, current: ReplicaSettings): ReplicaSettings {
    return this.scaleConfig.get(model) ?? current;
  }

  scaleApplied(model: string, configReplicas: ReplicaSettings): void {
    this.scaleConfig.set(model, configReplicas);
  }

  /** ForgetInstance acknowledged: kept within the bounds (the oldest entries go first). */
  forgottenApplied(incarnation: string, atWallMs: number): void {
    this.forgotten.delete(incarnation);
    this.forgotten.set(incarnation, atWallMs);
    const nowWall = this.d.clock.wallNow();
    for (const [inc, at] of this.forgotten) {
      if (this.forgotten.size <= maxForgotten && nowWall - at <= forgottenKeepMs) break;
      this.forgotten.delete(inc);
      this.d.settings.drop("forgotten", inc, "beyond the forgotten bounds");
    }
  }

  /** A node registered or became ready: a drain from the store applies; a lost declaration is over. */
  nodeHeard(nodeId: string): void {
    const drain = this.drainAtRegistration.get(nodeId);
    const n = this.d.nodes.get(nodeId);
    if (drain !== undefined && n !== undefined) {
      this.drainAtRegistration.delete(nodeId);
      if (!n.draining) {
        n.draining = true;
        this.drainAtInventory.set(nodeId, drain);
      }
    }
    this.lostUnregistered.delete(nodeId);
    if (this.d.settings.has("lost-node", nodeId)) this.d.settings.drop("lost-node", nodeId, "the node was heard from again");
  }

  /** A heartbeat was applied: a drain restored at registration starts its work after the node's first inventory. */
  inventoryApplied(nodeId: string): void {
    const drain = this.drainAtInventory.get(nodeId);
    if (drain === undefined) return;
    const n = this.d.nodes.get(nodeId);
    if (n?.inventory === undefined) return;
    this.drainAtInventory.delete(nodeId);
    // Undrained meanwhile: nothing to resume.
    if (n.draining) this.d.startDrain(nodeId, drain);
  }

  /** An operator undrained (acknowledged): a drain still waiting for the node is off too. */
  undrained(nodeId: string): void {
    this.drainAtRegistration.delete(nodeId);
    this.drainAtInventory.delete(nodeId);
  }
}
