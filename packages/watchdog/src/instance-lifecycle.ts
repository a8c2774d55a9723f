/**
 * Identity transitions the loader reports: spawned (loading), ready, adopted,
 * gone, reservation released. Selections (→ pending) and settle live in
 * their own files; every transition goes through `setState`.
 */
import { Code, WardenError } from "@warden/common";
import { applyModelConfig } from "./core-policy.js";
import type { CoreState, InstanceRecord } from "./core-state.js";
import type { RemoveResult } from "./decision.js";
import { checkGpu, checkName, checkSize } from "./input-checks.js";
import type { InstanceSpec, InstanceStateName, InstanceView } from "./instance.js";
import { capacityCheck, registeredAt, setState } from "./instance-index.js";
import { viewInstance } from "./instance-view.js";

/**
 * Registers a spawned process as `loading` (DESIGN §3.4 item 2). Attaches
 * the address to the incarnation's reservation when there is one; see
 * `WatchdogCore.registerLoading` for the preconditions.
 */
export function registerLoading(st: CoreState, spec: InstanceSpec): InstanceView {
  const maxName = st.caps.maxNameLength;
  const nodeId = checkName("nodeId", spec.nodeId, maxName);
  const model = checkName("model", spec.model, maxName);
  const incarnation = checkName("incarnation", spec.incarnation, maxName);
  const address = checkName("address", spec.address, maxName);
  const sizeBytes = checkSize(spec.sizeBytes);
  const gpu = checkGpu(spec.gpu);
  const other = registeredAt(st, address);
  if (other !== undefined && other.incarnation !== incarnation) {
    throw new WardenError(Code.FailedPrecondition, `address ${address} is registered to incarnation ${other.incarnation} (${other.model})`, {
      details: { address, incarnation: other.incarnation },
    });
  }
  const existing = st.records.get(incarnation);
  if (existing !== undefined) {
    if (existing.nodeId !== nodeId || existing.model !== model) {
      throw new WardenError(Code.FailedPrecondition, `incarnation ${incarnation} belongs to ${existing.model} on ${existing.nodeId}`);
    }
    if (existing.state.t === "loading" && existing.address === address) return viewInstance(st, existing);
    if (existing.state.t !== "reserved") {
      throw new WardenError(Code.FailedPrecondition, `incarnation ${incarnation} is ${existing.state.t}, not reserved`);
    }
    applyModelConfig(st, model, spec.groups, spec.pinned);
    dropPredecessorRequests(st, address);
    existing.address = address;
    existing.addressSeq = st.nextSeq++;
    existing.gpu = gpu;
    if (spec.sizeBytes !== undefined) existing.sizeBytes = sizeBytes;
    setState(st, existing, { t: "loading", sinceMs: st.clock.now() });
    return viewInstance(st, existing);
  }
  capacityCheck(st);
  applyModelConfig(st, model, spec.groups, spec.pinned);
  dropPredecessorRequests(st, address);
  const seq = st.nextSeq++;
  const rec: InstanceRecord = {
    incarnation,
    nodeId,
    model,
    seq,
    address,
    addressSeq: seq,
    sizeBytes,
    gpu,
    state: { t: "loading", sinceMs: 0 },
    indexedAddress: undefined,
  };
  setState(st, rec, { t: "loading", sinceMs: st.clock.now() });
  return viewInstance(st, rec);
}

/**
 * A new incarnation on an address starts with no request state. Nothing is
 * registered there (checked above), so whatever state is left belongs to a
 * predecessor whose port the agent recycled — it does so only once that
 * process has exited — e.g. one still pending its stop (settle row 1 then
 * touches nothing). Its calls can only fail; kept, they would make the new
 * instance busy since the oldest of them (the busy-killer evicting it for
 * them, seed 18428) and keep markReady from seeding its idle state. Their
 * completions become no-ops.
 */
function dropPredecessorRequests(st: CoreState, address: string): void {
  // Only a predecessor's record still at the address makes its calls stale:
  // calls tracked on an address nothing was ever registered at are the
  // router's own (LocalAI's by-address semantics) and stay.
  if ((st.atAddress.get(address)?.size ?? 0) > 0 && st.requests.has(address)) st.requests.clear(address);
}

/** Loading → ready, seeding idle state; see `WatchdogCore.markReady` for why. */
export function markReady(st: CoreState, incarnation: string): InstanceStateName | "pending" | "unknown" {
  const rec = st.records.get(incarnation);
  if (rec === undefined) return "unknown";
  const s = rec.state;
  switch (s.t) {
    case "loading":
      setState(st, rec, { t: "ready", sinceMs: st.clock.now() });
      if (rec.address !== undefined) st.requests.seedIdle(rec.address);
      return "ready";
    case "pending":
      if (s.from === "loading") s.from = "ready";
      if (rec.address !== undefined) st.requests.seedIdle(rec.address);
      return "pending";
    case "reserved":
      throw new WardenError(Code.FailedPrecondition, `incarnation ${incarnation} is reserved; register it as loading first`);
    case "ready":
    case "freed":
      return s.t;
  }
}

/** Forgets an instance (failed load, exit); a pending one is only marked exited. See `WatchdogCore.remove`. */
export function remove(st: CoreState, incarnation: string): RemoveResult {
  const rec = st.records.get(incarnation);
  if (rec === undefined) return { t: "unknown" };
  const s = rec.state;
  switch (s.t) {
    case "reserved": {
      const instance = viewInstance(st, rec);
      setState(st, rec, undefined);
      return { t: "released", instance };
    }
    case "pending":
      s.exited = true;
      return { t: "pending", instance: viewInstance(st, rec) };
    case "loading":
    case "ready":
    case "freed": {
      const instance = viewInstance(st, rec);
      setState(st, rec, undefined);
      const cleared = rec.address !== undefined && !st.atAddress.has(rec.address) ? st.requests.clear(rec.address) : [];
      return { t: "removed", instance, clearedRequestIds: cleared };
    }
  }
}

export function releaseReservation(st: CoreState, incarnation: string): boolean {
  const rec = st.records.get(incarnation);
  if (rec?.state.t !== "reserved") return false;
  setState(st, rec, undefined);
  return true;
}
