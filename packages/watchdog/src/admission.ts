import { Code, WardenError } from "@warden/common";
import { applyModelConfig } from "./core-policy.js";
import type { CoreState, InstanceRecord } from "./core-state.js";
import type { AdmissionDecision, LimitExceeded } from "./decision.js";
import { enforceGroups, enforceLimit } from "./enforcement.js";
import { checkName, checkSize } from "./input-checks.js";
import type { AdmissionRequest } from "./instance.js";
import { capacityCheck, setState } from "./instance-index.js";
import { nodeOccupancy } from "./occupancy.js";

/**
 * One atomic admission step on a node (DESIGN §3.4 item 3): groups first,
 * then the limit; the admitted load is reserved under its incarnation in the
 * same step. Idempotent for an incarnation already reserved on that node.
 */
export function admit(st: CoreState, request: AdmissionRequest): AdmissionDecision {
  const maxName = st.caps.maxNameLength;
  const nodeId = checkName("nodeId", request.nodeId, maxName);
  const model = checkName("model", request.model, maxName);
  const incarnation = checkName("incarnation", request.incarnation, maxName);
  const sizeBytes = checkSize(request.sizeBytes);
  const existing = st.records.get(incarnation);
  if (existing !== undefined) {
    if (existing.state.t === "reserved" && existing.nodeId === nodeId && existing.model === model) {
      return { t: "admitted", occupancy: nodeOccupancy(st, nodeId), limitExceeded: undefined };
    }
    throw new WardenError(Code.AlreadyExists, `incarnation ${incarnation} is already ${existing.state.t}`, { details: { incarnation } });
  }
  capacityCheck(st);
  applyModelConfig(st, model, request.groups, request.pinned);
  const g = enforceGroups(st, nodeId, model, model, request.spare);
  if (g.conflicts > 0) return { t: "wait", cause: "group", stops: g.stops, needMore: g.needMore, shortfall: g.shortfall };
  const l = enforceLimit(st, nodeId, model, request.spare);
  let limitExceeded: LimitExceeded | undefined;
  if (!l.fits) {
    if (l.stops.length > 0 || l.needMore || !l.pinsOnly) return { t: "wait", cause: "limit", stops: l.stops, needMore: l.needMore, shortfall: l.shortfall };
    const n = st.nodes.get(nodeId);
    const pinnedIncarnations = n === undefined ? [] : [...n.instances].filter((r) => st.pinned.has(r.model)).map((r) => r.incarnation);
    limitExceeded = {
      type: "policy.limit-exceeded",
      nodeId,
      model,
      incarnation,
      limit: st.policy.limitPerNode,
      occupied: l.occupancy.total + 1,
      pinnedIncarnations,
    };
  }
  const rec: InstanceRecord = {
    incarnation,
    nodeId,
    model,
    seq: st.nextSeq++,
    address: undefined,
    addressSeq: undefined,
    sizeBytes,
    gpu: undefined,
    state: { t: "reserved", sinceMs: 0 },
    indexedAddress: undefined,
  };
  setState(st, rec, { t: "reserved", sinceMs: st.clock.now() });
  return { t: "admitted", occupancy: nodeOccupancy(st, nodeId), limitExceeded };
}
