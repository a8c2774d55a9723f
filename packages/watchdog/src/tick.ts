/**
 * The periodic eviction paths, in LocalAI's order: busy (stuck requests),
 * idle, then the per-node memory reclaimer.
 */
import { addressDueAtMs, addressTimer } from "./address-timer.js";
import type { CoreState, InstanceRecord, NodeRecord } from "./core-state.js";
import type { TickDecision } from "./decision.js";
import { detach, isBusy, orderVictims } from "./detach.js";
import { registeredAt } from "./instance-index.js";
import type { MemoryDevice, PressureChange } from "./memory-pressure.js";
import type { StopCommand } from "./stop-command.js";

/** What one tick collects while judging addresses. */
interface TickRun {
  readonly now: number;
  readonly stops: StopCommand[];
  readonly untracked: string[];
  /** model → ready instances left above its floor this tick (computed on first need). */
  readonly floors: Map<string, number>;
}

/** What judging one address came to, for its place in the schedule. */
type Judged = { readonly t: "acted" } | { readonly t: "none" } | { readonly t: "wait"; readonly dueAtMs: number } | { readonly t: "floor"; readonly model: string };

const acted: Judged = Object.freeze({ t: "acted" });
const nothing: Judged = Object.freeze({ t: "none" });

/**
 * One watchdog tick, checks in LocalAI's order busy → idle → memory. Pending
 * addresses are skipped; loading and freed instances are never selected.
 * Never waits: the returned stops are the caller's to send.
 *
 * Judges only the addresses whose busy or idle timer is due (tick-schedule.ts),
 * in the order a scan of every address would: the same decisions as
 * {@link tickFullScan}, for work proportional to what is due and what changed.
 */
export function tick(st: CoreState): TickDecision {
  const retimed = refreshSchedule(st);
  const run: TickRun = { now: st.clock.now(), stops: [], untracked: [], floors: new Map() };
  const due = st.schedule.takeDue(run.now);
  for (const e of due) {
    const j = judge(st, e.address, run);
    if (j.t === "wait") st.schedule.reschedule(e, j.dueAtMs);
    else if (j.t === "floor") st.schedule.parkOnFloor(e, j.model);
    // acted: the change it made marked the address for re-timing; none: only a change can.
  }
  st.schedule.recordWork(retimed, due.length);
  return finishTick(st, run);
}

/**
 * The same tick judging every address with request state: the reference the
 * due-only tick is checked against (property tests, bench). Not for production.
 */
export function tickFullScan(st: CoreState): TickDecision {
  const retimed = refreshSchedule(st);
  const run: TickRun = { now: st.clock.now(), stops: [], untracked: [], floors: new Map() };
  const addresses = [...st.requests.addresses()];
  for (const address of addresses) judge(st, address, run);
  st.schedule.recordWork(retimed, addresses.length);
  return finishTick(st, run, true);
}

/** Re-times the addresses that changed since the last refresh; returns how many. */
export function refreshSchedule(st: CoreState): number {
  return st.schedule.refresh({
    takeChanged: () => st.requests.takeChanged(),
    addresses: () => [...st.requests.addresses()],
    seqOf: (a) => st.requests.seqOf(a),
    dueAtMs: (a) => {
      // Calls starting or ending at an instance's address change its model's replica picture too.
      if (st.changedModels !== undefined) {
        const rec = registeredAt(st, a);
        if (rec !== undefined) st.changedModels.add(rec.model);
      }
      return addressDueAtMs(st, a);
    },
  });
}

/** Judges one address at `run.now` and acts on it (LocalAI's busy, then idle check). */
function judge(st: CoreState, address: string, run: TickRun): Judged {
  const t = addressTimer(st, address);
  if (t.t === "none") return nothing;
  if (run.now - t.sinceMs <= t.timeoutMs) return { t: "wait", dueAtMs: t.sinceMs + t.timeoutMs };
  if (t.rec === undefined) {
    st.requests.clear(address);
    run.untracked.push(address);
    return acted;
  }
  // The node's agent is unreachable: no stop could reach the instance; look again one timeout later.
  if (st.evictionsHeld.has(t.rec.nodeId)) return { t: "wait", dueAtMs: run.now + t.timeoutMs };
  if (t.t === "busy") {
    run.stops.push(detach(st, t.rec, "busy", true, undefined));
    return acted;
  }
  if (!aboveFloor(st, t.rec.model, t.minReplicas, run.floors)) return { t: "floor", model: t.rec.model };
  run.stops.push(detach(st, t.rec, "idle", false, undefined));
  return acted;
}

/**
 * The per-node memory reclaimer, after the busy and idle checks: over the
 * nodes a tick could change (`CoreState.memoryWatch`: pressure on, or a new
 * threshold), in node order; `everyNode` looks at every node with a reading
 * (the reference).
 */
function finishTick(st: CoreState, run: TickRun, everyNode = false): TickDecision {
  const { now, stops } = run;
  const p = st.policy;
  const pressureChanges: PressureChange[] = [];
  const watched = everyNode ? [...st.nodes.values()] : [...st.memoryWatch].filter((n) => st.nodes.get(n.nodeId) === n).sort((a, b) => a.seq - b.seq);
  for (const n of watched) {
    const mem = n.memory;
    if (mem === undefined) continue;
    pressureChanges.push(...mem.evaluate(now, p));
    if (!p.memoryReclaimer || mem.reclaimInFlight !== undefined || !mem.releaseWaitOver(now, p) || st.evictionsHeld.has(n.nodeId)) continue;
    const devices = mem.devicesToRelieve(p);
    if (devices.length === 0) continue;
    const victim = memoryVictim(st, n, devices);
    if (victim === undefined) continue;
    mem.reclaimInFlight = victim.incarnation;
    stops.push(detach(st, victim, "memory", isBusy(st, victim), undefined));
  }
  // Pressure off: nothing but a new reading or threshold can make the node interesting again.
  for (const n of st.memoryWatch) if (st.nodes.get(n.nodeId) !== n || n.memory?.hasPressure() !== true) st.memoryWatch.delete(n);
  return { stops, untrackedAddresses: run.untracked, pressureChanges };
}

/**
 * True when idle-evicting one more ready instance of `model` keeps it at or
 * above its replica floor (min is a floor for the count, like a
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
