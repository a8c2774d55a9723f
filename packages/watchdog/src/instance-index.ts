import { Code, WardenError } from "@warden/common";
import { isRegistered, type CoreState, type InstanceRecord, type NodeRecord, type RecState } from "./core-state.js";

/** The node's record, created on first use. Throws RESOURCE_EXHAUSTED past `maxNodes`. */
export function nodeFor(st: CoreState, nodeId: string): NodeRecord {
  let n = st.nodes.get(nodeId);
  if (n === undefined) {
    if (st.nodes.size >= st.caps.maxNodes) throw new WardenError(Code.ResourceExhausted, `at most ${st.caps.maxNodes} nodes`, { details: { nodeId } });
    n = { nodeId, seq: st.nextNodeSeq++, instances: new Set(), occupancy: [], memory: undefined };
    st.nodes.set(nodeId, n);
  }
  return n;
}

export function dropNodeIfEmpty(st: CoreState, n: NodeRecord): void {
  if (n.instances.size === 0 && n.occupancy.length === 0 && n.memory === undefined) st.nodes.delete(n.nodeId);
}

/** The registered (loading, ready, freed) record at an address, if any. */
export function registeredAt(st: CoreState, address: string): InstanceRecord | undefined {
  const set = st.atAddress.get(address);
  if (set === undefined) return undefined;
  for (const r of set) if (isRegistered(r.state.t)) return r;
  return undefined;
}

export function addressPending(st: CoreState, address: string): boolean {
  const set = st.atAddress.get(address);
  if (set === undefined) return false;
  for (const r of set) if (r.state.t === "pending") return true;
  return false;
}

/**
 * The one transition point. `next === undefined` forgets the record. Keeps
 * every index (address, model, node, loaded count) in step with the state.
 */
export function setState(st: CoreState, rec: InstanceRecord, next: RecState | undefined): void {
  const known = st.records.get(rec.incarnation) === rec;
  if (known && isRegistered(rec.state.t)) st.loaded--;
  // The records at an address decide its busy and idle timers: re-time them at the next tick.
  if (rec.indexedAddress !== undefined) st.schedule.markDirty(rec.indexedAddress);
  if (rec.address !== undefined) st.schedule.markDirty(rec.address);
  // One more ready instance may lift the model's replica floor off idle evictions it held back.
  if (next?.t === "ready") st.schedule.unparkFloor(rec.model);
  st.changedModels?.add(rec.model);
  if (known || next !== undefined) st.modelVersions.set(rec.model, ++st.modelChanges);
  if (rec.indexedAddress !== undefined) {
    const set = st.atAddress.get(rec.indexedAddress);
    set?.delete(rec);
    if (set?.size === 0) st.atAddress.delete(rec.indexedAddress);
    rec.indexedAddress = undefined;
  }
  if (next === undefined) {
    if (!known) return;
    st.records.delete(rec.incarnation);
    const m = st.byModel.get(rec.model);
    m?.delete(rec);
    if (m?.size === 0) {
      st.byModel.delete(rec.model);
      st.modelVersions.delete(rec.model); // none left: 0, and a later record takes a new count
    }
    const n = st.nodes.get(rec.nodeId);
    if (n !== undefined) {
      n.instances.delete(rec);
      dropNodeIfEmpty(st, n);
    }
    return;
  }
  if (!known) {
    st.records.set(rec.incarnation, rec);
    let m = st.byModel.get(rec.model);
    if (m === undefined) {
      m = new Set();
      st.byModel.set(rec.model, m);
    }
    m.add(rec);
    nodeFor(st, rec.nodeId).instances.add(rec);
  }
  rec.state = next;
  if (isRegistered(next.t)) st.loaded++;
  if (rec.address !== undefined && next.t !== "reserved") {
    let set = st.atAddress.get(rec.address);
    if (set === undefined) {
      set = new Set();
      st.atAddress.set(rec.address, set);
    }
    set.add(rec);
    rec.indexedAddress = rec.address;
  }
}

export function capacityCheck(st: CoreState): void {
  if (st.records.size >= st.caps.maxInstances) throw new WardenError(Code.ResourceExhausted, `at most ${st.caps.maxInstances} instances`);
}
