/**
 * The periodic eviction paths, in LocalAI's order: busy (stuck requests),
 * idle, then the per-node memory reclaimer.
 */
import { isPlanted } from "@warden/common";
import type { CoreState, InstanceRecord, NodeRecord } from "./core-state.js";
import type { TickDecision } from "./decision.js";
import { detach, isBusy, orderVictims } from "./detach.js";
import { addressPending, registeredAt } from "./instance-index.js";
import type { MemoryDevice, PressureChange } from "./memory-pressure.js";
import type { StopCommand } from "./stop-command.js";

/**
 * One watchdog tick, checks in LocalAI's order busy → idle → memory. Pending
 * addresses are skipped; loading and freed instances are never selected.
 * Never waits: the returned stops are the caller's to send.
 */
export function tick(st: CoreState): TickDecision {
  const now = st.clock.now();
  const p = st.policy;
  const stops: StopCommand[] = [];
  const untracked: string[] = [];
  // model → ready instances left above its floor this tick (computed on first need).
  const floors = new Map<string, number>();
  for (const address of [...st.requests.addresses()]) {
    if (addressPending(st, address) && !isPlanted("idle-busy-see-pending")) continue;
    const rec = registeredAt(st, address);
    const busySince = st.requests.busySinceMs(address);
    if (busySince !== undefined) {
      if (!p.busyCheck || now - busySince <= p.busyTimeoutMs) continue;
      if (rec === undefined) {
        st.requests.clear(address);
        untracked.push(address);
      } else if (rec.state.t === "ready") {
        // The busy-killer ignores pins: a stuck backend must be restartable (DESIGN §3.4 item 8).
        stops.push(detach(st, rec, "busy", true, undefined));
      }
      continue;
    }
    const idleSince = st.requests.idleSinceMs(address);
    if (idleSince === undefined) continue;
    const rule = rec === undefined ? undefined : st.modelRules.get(rec.model);
    // A per-model idle timeout (0 = never) replaces the policy's and applies even with the idle check off.
    const timeoutMs = rule?.idleTimeoutMs ?? p.idleTimeoutMs;
    const checked = rule?.idleTimeoutMs === undefined ? p.idleCheck : rule.idleTimeoutMs > 0;
    if (rec === undefined) {
      // Request state nobody owns is garbage whether or not the idle check is on: bounded memory.
      if (now - idleSince <= timeoutMs) continue;
      st.requests.clear(address);
      untracked.push(address);
    } else if (checked && now - idleSince > timeoutMs && rec.state.t === "ready" && !st.pinned.has(rec.model) && aboveFloor(st, rec.model, rule?.minReplicas ?? 0, floors)) {
      stops.push(detach(st, rec, "idle", false, undefined));
    }
  }
  const pressureChanges: PressureChange[] = [];
  for (const n of st.nodes.values()) {
    const mem = n.memory;
    if (mem === undefined) continue;
    pressureChanges.push(...mem.evaluate(now, p));
    if (!p.memoryReclaimer || mem.reclaimInFlight !== undefined || !mem.releaseWaitOver(now, p)) continue;
    const devices = mem.devicesToRelieve(p);
    if (devices.length === 0) continue;
    const victim = memoryVictim(st, n, devices);
    if (victim === undefined) continue;
    mem.reclaimInFlight = victim.incarnation;
    stops.push(detach(st, victim, "memory", isBusy(st, victim), undefined));
  }
  return { stops, untrackedAddresses: untracked, pressureChanges };
}

/**
 * True when idle-evicting one more ready instance of `model` keeps it at or
 * above its replica floor (issue 16: min is a floor for the count, like a
 * pin); counts down as this tick selects. O(instances of the model), once per
 * model per tick.
 */
function aboveFloor(st: CoreState, model: string, min: number, floors: Map<string, number>): boolean {
  if (min <= 0) return true;
  let left = floors.get(model);
  if (left === undefined) {
    left = 0;
    for (const r of st.byModel.get(model) ?? []) if (r.state.t === "ready") left++;
    left -= min;
  }
  if (left <= 0) {
    floors.set(model, left);
    return false;
  }
  floors.set(model, left - 1);
  return true;
}

function memoryVictim(st: CoreState, n: NodeRecord, devices: MemoryDevice[]): InstanceRecord | undefined {
  const all = devices.includes("ram");
  const set = new Set<MemoryDevice>(devices);
  const force = st.policy.forceEvictionWhenBusy;
  // Instances with no device assignment may sit on any GPU: they are candidates too.
  const candidates = [...n.instances].filter(
    (r) => r.state.t === "ready" && (all || r.gpu === undefined || set.has(r.gpu)) && !st.pinned.has(r.model) && (force || !isBusy(st, r)),
  );
  return orderVictims(st, candidates)[0];
}
