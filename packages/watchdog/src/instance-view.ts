import { groupsOf } from "./core-policy.js";
import type { CoreState, InstanceRecord } from "./core-state.js";
import type { InstanceView } from "./instance.js";

/** A fresh, caller-owned view of one record with its address's request state. */
export function viewInstance(st: CoreState, r: InstanceRecord): InstanceView {
  const s = r.state;
  const a = r.address;
  const req = a === undefined ? undefined : st.requests.view(a);
  return {
    nodeId: r.nodeId,
    model: r.model,
    incarnation: r.incarnation,
    address: a,
    state: s.t === "pending" ? s.from : s.t,
    stateSinceMs: s.sinceMs,
    pendingEviction:
      s.t === "pending" ? { reason: s.command.reason, force: s.command.force, sinceMs: s.sinceMs, command: s.command, exited: s.exited } : undefined,
    inFlight: req?.inFlight ?? 0,
    busySinceMs: req?.busySinceMs,
    idleSinceMs: req?.idleSinceMs,
    lastUsedMs: req?.lastUsedMs,
    sizeBytes: r.sizeBytes,
    gpu: r.gpu,
    pinned: st.pinned.has(r.model),
    groups: [...groupsOf(st, r.model)],
  };
}
