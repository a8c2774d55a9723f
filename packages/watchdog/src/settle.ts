import { isPlanted } from "@warden/common";
import type { CoreState, InstanceRecord } from "./core-state.js";
import type { SettleResult } from "./decision.js";
import { setState } from "./instance-index.js";
import { viewInstance } from "./instance-view.js";
import type { DetachedState, StopOutcome } from "./stop-command.js";

/**
 * Applies a stop outcome atomically (DESIGN §3.2 step 4, the settle table).
 * For a failed stop it asks `hasModelAtAddress` synchronously, in this same
 * call. A settle for an incarnation with no stop in flight is a no-op
 * (`not-pending`).
 */
export function settle(st: CoreState, incarnation: string, outcome: StopOutcome): SettleResult {
  const rec = st.records.get(incarnation);
  if (rec?.state.t !== "pending" || rec.address === undefined) return { row: 0, t: "not-pending", incarnation };
  const pend = rec.state;
  const address = rec.address;
  const now = st.clock.now();
  const node = st.nodes.get(rec.nodeId);
  const mem = node?.memory;
  if (mem !== undefined && mem.reclaimInFlight === incarnation) {
    mem.reclaimInFlight = undefined;
    if (outcome.t !== "failed" || pend.exited) mem.lastReclaimSettledAtMs = now;
  }
  // Row 1: another incarnation was registered (or is being stopped) on this address meanwhile.
  // Only a later one: an earlier record still at the address is the stale one (its port was
  // recycled to this incarnation, and its own stop is still out) — this incarnation's failed
  // stop must not drop the identity the loader still holds (seed 14857).
  let replacement: InstanceRecord | undefined;
  for (const r of st.atAddress.get(address) ?? []) if (r !== rec && (r.addressSeq ?? 0) > (rec.addressSeq ?? 0)) replacement = r;
  if (replacement !== undefined && !isPlanted("stop-without-incarnation-check")) {
    const instance = viewInstance(st, rec);
    setState(st, rec, undefined);
    return { row: 1, t: "replaced", instance, replacedBy: replacement.incarnation };
  }
  if (outcome.t !== "failed" || pend.exited || isPlanted("forget-on-failed-stop")) {
    const instance = viewInstance(st, rec);
    setState(st, rec, undefined);
    return { row: 2, t: "stopped", instance, clearedRequestIds: st.requests.clear(address) };
  }
  if (isPlanted("register-again-without-asking-loader") || loaderHolds(st, rec.model, address, incarnation)) {
    const state: DetachedState = outcome.freed || pend.from === "freed" ? "freed" : pend.from;
    setState(st, rec, { t: state, sinceMs: now });
    if (isPlanted("restore-request-snapshot")) st.requests.restoreSnapshot(address, pend.command.openRequestIds, pend.command.atMs);
    return { row: 3, t: "registered-again", instance: viewInstance(st, rec), state, error: outcome.message };
  }
  const instance = viewInstance(st, rec);
  setState(st, rec, undefined);
  const openRequestIds = st.requests.clear(address);
  if (isPlanted("restore-request-snapshot")) st.requests.restoreSnapshot(address, pend.command.openRequestIds, pend.command.atMs);
  return { row: 4, t: "dropped", instance, openRequestIds, terminalReason: "instance-dropped", error: outcome.message };
}

/**
 * Asks the loader. A throwing query is a bug in the caller; we answer "holds"
 * so the instance is registered again rather than forgotten: a phantom is
 * visible and retried, an amnesiac backend holds memory for good.
 */
function loaderHolds(st: CoreState, model: string, address: string, incarnation: string): boolean {
  try {
    return st.loader.hasModelAtAddress(model, address, incarnation);
  } catch {
    return true;
  }
}
