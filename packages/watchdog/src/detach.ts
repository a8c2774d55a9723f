import { Code, WardenError } from "@warden/common";
import { isRegistered, type CoreState, type InstanceRecord } from "./core-state.js";
import { setState } from "./instance-index.js";
import type { EvictionReason, StopCommand } from "./stop-command.js";
import { compareVictims } from "./victim-order.js";

/**
 * What every selection path (group, limit, busy, idle, memory, explicit)
 * ends in: the registered instance is detached as `pending` and its stop
 * command returned for the caller to send.
 */
export function detach(st: CoreState, rec: InstanceRecord, reason: EvictionReason, force: boolean, trigger: string | undefined): StopCommand {
  const s = rec.state;
  if (!isRegistered(s.t) || rec.address === undefined) throw new WardenError(Code.Internal, `cannot detach ${rec.incarnation} in state ${s.t}`);
  const now = st.clock.now();
  const openRequestIds = st.requests.openIds(rec.address);
  const command: StopCommand = Object.freeze({
    nodeId: rec.nodeId,
    address: rec.address,
    incarnation: rec.incarnation,
    model: rec.model,
    force,
    reason,
    wasBusy: openRequestIds.length > 0,
    detachedFrom: s.t,
    openRequestIds: Object.freeze(openRequestIds),
    trigger,
    atMs: now,
  });
  // Identity only: request state stays live during the stop (DESIGN §3.2 step 2).
  setState(st, rec, { t: "pending", sinceMs: now, from: s.t, command, exited: false });
  return command;
}

export function isBusy(st: CoreState, rec: InstanceRecord): boolean {
  return rec.address !== undefined && st.requests.inFlight(rec.address) > 0;
}

/** Candidates in victim order (victim-order.ts), first victim first. */
export function orderVictims(st: CoreState, recs: InstanceRecord[]): InstanceRecord[] {
  const sizeAware = st.policy.sizeAware;
  const keyed = recs.map((r) => ({
    r,
    k: { lastUsedMs: r.address === undefined ? undefined : st.requests.lastUsedMs(r.address), sizeBytes: r.sizeBytes, seq: r.seq },
  }));
  keyed.sort((a, b) => compareVictims(a.k, b.k, sizeAware));
  return keyed.map((x) => x.r);
}
