import type { CoreState } from "./core-state.js";
import { registeredAt } from "./instance-index.js";
import type { InstanceStateName, InstanceView } from "./instance.js";
import { viewInstance } from "./instance-view.js";
import { nodeOccupancy, placementSummary, type EvictionAsk, type NodePlacementSummary } from "./occupancy.js";
import { copyPolicy } from "./policy.js";
import type { AddressRequestView } from "./request-tracker.js";
import type { NodeView, WatchdogSnapshot } from "./watchdog-snapshot.js";

/**
 * The read-only half of {@link WatchdogCore}: every query over the core's
 * state, kept apart from the mutations so each file stays one concern. It
 * owns nothing of its own; WatchdogCore builds the state and hands it here.
 */
export abstract class WatchdogQueries {
  protected constructor(protected readonly st: CoreState) {}

  // ---------------------------------------------------------------- queries

  /** Registered (loading, ready, freed) instances, pending excluded: LocalAI's loaded count. */
  loadedCount(): number {
    return this.st.loaded;
  }

  instance(incarnation: string): InstanceView | undefined {
    const r = this.st.records.get(incarnation);
    return r === undefined ? undefined : viewInstance(this.st, r);
  }

  /** The state of one record, "pending" while a stop of it is in flight (O(1), no copy: the replica routing's hot path). */
  stateOf(incarnation: string): InstanceStateName | "pending" | undefined {
    return this.st.records.get(incarnation)?.state.t;
  }

  /**
   * An instance of `model` pending eviction or freed — one the loader may
   * already have dropped (a remote stop drops the local half before
   * StopBackend) — whose settle a call waits for; O(instances of the model).
   */
  settlingOf(model: string): string | undefined {
    for (const r of this.st.byModel.get(model) ?? []) if (r.state.t === "pending" || r.state.t === "freed") return r.incarnation;
    return undefined;
  }

  /** The registered (not pending) instance at an address: the routing identity. */
  instanceAt(address: string): InstanceView | undefined {
    const r = registeredAt(this.st, address);
    return r === undefined ? undefined : viewInstance(this.st, r);
  }

  /**
   * What placement needs about one node for a load of `model` (DESIGN §3.5),
   * computed from that node's own records — no snapshot, no views — so a
   * placement decision over many nodes stays proportional to their instances.
   * `evictable` means a policy path could select it now: ready, not pending,
   * not pinned, and idle unless force-eviction-when-busy. With `evict`, also
   * what an admission there would evict first (ExplainPlacement): group
   * conflicts, then, past `evict.limit`, the least recently used idle ones.
   */
  placementSummary(nodeId: string, model: string, groups: readonly string[], evict?: EvictionAsk): NodePlacementSummary {
    return placementSummary(this.st, nodeId, model, groups, evict);
  }

  /** The instances on one node, from the per-node index: O(instances there) (a page of ListModels). */
  instancesOnNode(nodeId: string): InstanceView[] {
    return [...(this.st.nodes.get(nodeId)?.instances ?? [])].map((r) => viewInstance(this.st, r));
  }

  /** How many instances one node holds, from the per-node index: O(1) (a page of ListNodes). */
  instanceCountOn(nodeId: string): number {
    return this.st.nodes.get(nodeId)?.instances.size ?? 0;
  }

  /**
   * Each instance of `model` with its state ("pending" while a stop of it is
   * in flight), no view made: a count over every replica of a model
   * (ListModels, the replica gauges) allocates nothing per instance.
   */
  forEachOfModel(model: string, fn: (incarnation: string, state: InstanceStateName | "pending") => void): void {
    const set = this.st.byModel.get(model);
    if (set === undefined) return;
    for (const r of set) fn(r.incarnation, r.state.t);
  }

  /**
   * Changes whenever one of `model`'s records is added, removed or changes
   * state (pending included); 0 while it has none. O(1): a reader that
   * counts the model's records (replica summaries) keeps its count until
   * this moves.
   */
  modelVersion(model: string): number {
    return this.st.modelVersions.get(model) ?? 0;
  }

  instancesOfModel(model: string): InstanceView[] {
    return [...(this.st.byModel.get(model) ?? [])].map((r) => viewInstance(this.st, r));
  }

  /**
   * Per node holding instances: how many are in each state ("pending" while
   * a stop is in flight; states with none left out) and the calls in flight
   * at their addresses, from the per-node index, no view made: a scrape's
   * per-node gauges count every instance without allocating per instance.
   * O(instances). `counts` is the caller's to keep.
   */
  forEachNodeCount(fn: (nodeId: string, counts: Partial<Record<InstanceStateName | "pending", number>>, inFlight: number) => void): void {
    // Calls in flight from the few busy addresses, not a lookup per instance in the table of every address.
    const busy = this.st.requests.busyAddresses();
    for (const n of this.st.nodes.values()) {
      if (n.instances.size === 0) continue;
      let reserved = 0;
      let loading = 0;
      let ready = 0;
      let freed = 0;
      let pending = 0;
      let inFlight = 0;
      for (const r of n.instances) {
        switch (r.state.t) {
          case "reserved":
            reserved++;
            break;
          case "loading":
            loading++;
            break;
          case "ready":
            ready++;
            break;
          case "freed":
            freed++;
            break;
          case "pending":
            pending++;
            break;
        }
        if (busy.size !== 0 && r.address !== undefined) inFlight += busy.get(r.address) ?? 0;
      }
      const counts: Partial<Record<InstanceStateName | "pending", number>> = {};
      if (reserved !== 0) counts.reserved = reserved;
      if (loading !== 0) counts.loading = loading;
      if (ready !== 0) counts.ready = ready;
      if (freed !== 0) counts.freed = freed;
      if (pending !== 0) counts.pending = pending;
      fn(n.nodeId, counts, inFlight);
    }
  }

  /** Every instance's view, as in snapshot() but without the policy, node and address views (a check after every simulated step needs only these). */
  instances(): InstanceView[] {
    return [...this.st.records.values()].map((r) => viewInstance(this.st, r));
  }

  /**
   * A consistent snapshot of everything (ListModels, the simulation's
   * invariant checks). Taken in one synchronous call, so it is never torn.
   */
  snapshot(): WatchdogSnapshot {
    const st = this.st;
    const nodes: NodeView[] = [];
    for (const n of st.nodes.values()) {
      nodes.push({
        nodeId: n.nodeId,
        occupancy: nodeOccupancy(st, n.nodeId),
        occupancyEntries: [...n.occupancy],
        memory: n.memory?.view() ?? [],
        reclaimInFlight: n.memory?.reclaimInFlight,
      });
    }
    const addresses: AddressRequestView[] = [];
    for (const a of st.requests.addresses()) {
      const v = st.requests.view(a);
      if (v !== undefined) addresses.push(v);
    }
    return {
      atMs: st.clock.now(),
      policy: copyPolicy(st.policy),
      loadedCount: st.loaded,
      instances: this.instances(),
      addresses,
      nodes,
    };
  }
}
