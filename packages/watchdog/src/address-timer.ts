/**
 * The busy and idle timers of one address: which check could fire for it and
 * from when. The tick judges due addresses with it, and the tick schedule
 * times every address with it, so the two never disagree about what is due.
 */
import { isPlanted } from "@warden/common";
import type { CoreState, InstanceRecord } from "./core-state.js";
import { addressPending, registeredAt } from "./instance-index.js";

/**
 * - `none`: neither check can fire until something about the address changes
 *   (pending; a loading or freed instance; busy with the busy check off;
 *   idle with the idle check off for it, or pinned; neither busy nor idle).
 * - `busy`: fires once `now − sinceMs > timeoutMs` (the busy-killer for a
 *   ready instance; garbage collection for request state nobody owns).
 * - `idle`: fires once `now − sinceMs > timeoutMs` (for an owned ready
 *   instance, only while its model stays above its replica floor `minReplicas`).
 */
export type AddressTimer =
  | { readonly t: "none" }
  | { readonly t: "busy"; readonly sinceMs: number; readonly timeoutMs: number; readonly rec: InstanceRecord | undefined }
  | { readonly t: "idle"; readonly sinceMs: number; readonly timeoutMs: number; readonly rec: InstanceRecord | undefined; readonly minReplicas: number };

const none: AddressTimer = Object.freeze({ t: "none" });

/** The timer of `address` now, in LocalAI's order: busy first, then idle. */
export function addressTimer(st: CoreState, address: string): AddressTimer {
  if (addressPending(st, address) && !isPlanted("idle-busy-see-pending")) return none;
  const p = st.policy;
  const rec = registeredAt(st, address);
  const busySince = st.requests.busySinceMs(address);
  if (busySince !== undefined) {
    if (!p.busyCheck) return none;
    // The busy-killer ignores pins: a stuck backend must be restartable (DESIGN §3.4 item 8).
    if (rec !== undefined && rec.state.t !== "ready") return none;
    return { t: "busy", sinceMs: busySince, timeoutMs: p.busyTimeoutMs, rec };
  }
  const idleSince = st.requests.idleSinceMs(address);
  if (idleSince === undefined) return none;
  // Request state nobody owns is garbage whether or not the idle check is on: bounded memory.
  if (rec === undefined) return { t: "idle", sinceMs: idleSince, timeoutMs: p.idleTimeoutMs, rec, minReplicas: 0 };
  const rule = st.modelRules.get(rec.model);
  // A per-model idle timeout (0 = never) replaces the policy's and applies even with the idle check off.
  const timeoutMs = rule?.idleTimeoutMs ?? p.idleTimeoutMs;
  const checked = rule?.idleTimeoutMs === undefined ? p.idleCheck : rule.idleTimeoutMs > 0;
  if (!checked || rec.state.t !== "ready" || st.pinned.has(rec.model)) return none;
  return { t: "idle", sinceMs: idleSince, timeoutMs, rec, minReplicas: rule?.minReplicas ?? 0 };
}

/** When `address`'s timer runs out (for the schedule's order only: the tick judges with `now − since > timeout`). */
export function addressDueAtMs(st: CoreState, address: string): number | undefined {
  const t = addressTimer(st, address);
  return t.t === "none" ? undefined : t.sinceMs + t.timeoutMs;
}
