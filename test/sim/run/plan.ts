import { SimRandom } from "../kernel/sim-random.js";
import { isReplicated } from "./replica-profile.js";
import type { FaultType, SimOptions } from "./sim-options.js";
import type { HaFault } from "../ha/ha-profile.js";

/** One scheduled workload step or fault; `r` seeds the step's own choices. */
export type Step =
  /** `model`/`holdMs`: a replica burst's call (one model, held long enough to stack up in flight); otherwise drawn from `r`. */
  | { readonly kind: "call"; readonly atMs: number; readonly r: number; readonly model?: string; readonly holdMs?: number }
  | { readonly kind: "admin"; readonly atMs: number; readonly r: number; readonly op: AdminOp }
  | { readonly kind: "fault"; readonly atMs: number; readonly r: number; readonly fault: FaultType; readonly durationMs: number; readonly target: string }
  /** HA profile: a fault on the leader's process (ha/ha-cluster.ts). */
  | { readonly kind: "ha"; readonly atMs: number; readonly r: number; readonly fault: HaFault; readonly durationMs: number };

export type AdminOp = "load" | "unload" | "unload-force" | "drain" | "undrain" | "declare-lost" | "forget" | "policy" | "reload";

const adminOps: readonly AdminOp[] = ["load", "load", "load", "unload", "unload-force", "drain", "undrain", "declare-lost", "forget", "policy", "reload"];

/** Poisson-ish arrivals at `perMinute` over [0, durationMs). */
function arrivals(r: SimRandom, perMinute: number, durationMs: number): number[] {
  const out: number[] = [];
  if (perMinute <= 0) return out;
  const meanGapMs = 60_000 / perMinute;
  let t = r.next() * meanGapMs;
  while (t < durationMs) {
    out.push(Math.floor(t));
    t += -Math.log(1 - r.next()) * meanGapMs;
  }
  return out;
}

/**
 * The run's workload and faults, a pure function of the options. Shrinking
 * drops steps from this list and re-runs: each step carries its own seed, so
 * the ones kept do the same thing.
 */
export function makePlan(o: SimOptions): Step[] {
  const r = new SimRandom(o.seed).fork("plan");
  const steps: Step[] = [];
  // Bursts: the call rate triples inside a few windows.
  for (const atMs of arrivals(r, o.callsPerMinute, o.durationMs)) {
    const burst = Math.floor(atMs / 120_000) % 5 === 0 ? 3 : 1;
    for (let i = 0; i < burst; i++) steps.push({ kind: "call", atMs: atMs + i * 7, r: r.int(0, 2 ** 31) });
  }
  for (const atMs of arrivals(r, o.adminPerMinute, o.durationMs)) steps.push({ kind: "admin", atMs, r: r.int(0, 2 ** 31), op: r.pick(adminOps) });
  for (const f of o.faults) {
    const targets = f.targets.length > 0 ? f.targets : o.nodes.map((n) => n.nodeId);
    for (const atMs of arrivals(r, f.perMinute, o.durationMs)) {
      steps.push({ kind: "fault", atMs, r: r.int(0, 2 ** 31), fault: f.type, durationMs: Math.max(1_000, Math.floor(f.durationMs * (0.5 + r.next()))), target: r.pick(targets) });
    }
  }
  if (o.replicaProfile === true) steps.push(...replicaBursts(o));
  if (o.ha !== undefined) steps.push(...haFaultSteps(o));
  steps.sort((a, b) => a.atMs - b.atMs);
  return steps;
}

/**
 * Load that scales replicated models (replica profile only, from its own
 * stream, so other seeds' plans are unchanged): about one burst a minute per
 * replicated model, each more calls than its replicas' targets add up to,
 * held 2-20 s — every ready replica reaches `targetInFlight` (scale-up, or
 * scale-blocked when no node has room) — then quiet longer than
 * `scaleDownAfter` (scale-down back to `min`).
 */
function replicaBursts(o: SimOptions): Step[] {
  const r = new SimRandom(o.seed).fork("plan-replicas");
  const out: Step[] = [];
  for (const m of o.models) {
    if (!isReplicated(m)) continue;
    for (const atMs of arrivals(r, 1, o.durationMs)) {
      const calls = r.int(m.replicas.targetInFlight + 1, m.replicas.targetInFlight * m.replicas.max + 2);
      for (let i = 0; i < calls; i++) out.push({ kind: "call", atMs: atMs + i * 5, r: r.int(0, 2 ** 31), model: m.id, holdMs: r.int(2, 20) * 1_000 });
    }
  }
  return out;
}

/** The HA profile's faults (from their own stream): each enabled kind at the profile's rate, 1-20 s long. */
function haFaultSteps(o: SimOptions): Step[] {
  const ha = o.ha;
  if (ha === undefined) return [];
  const r = new SimRandom(o.seed).fork("plan-ha");
  const out: Step[] = [];
  for (const fault of ha.faults) {
    for (const atMs of arrivals(r, ha.perMinute, o.durationMs)) out.push({ kind: "ha", atMs, r: r.int(0, 2 ** 31), fault, durationMs: r.int(1, 20) * 1_000 });
  }
  // The lease stream's leader changes (a nats-server lost), from a stream of their own: no lease answer for 0.5-2 leases.
  const perMinute = ha.world?.streamLeaderChangesPerMinute ?? 0;
  if (perMinute > 0) {
    const rw = new SimRandom(o.seed).fork("plan-ha-world");
    for (const atMs of arrivals(rw, perMinute, o.durationMs)) out.push({ kind: "ha", atMs, r: rw.int(0, 2 ** 31), fault: "stream-leader-change", durationMs: Math.round(ha.leaseMs * (0.5 + rw.next() * 1.5)) });
  }
  return out;
}

export function describeStep(s: Step): string {
  switch (s.kind) {
    case "call":
      return `${String(s.atMs)} call${s.model === undefined ? "" : ` ${s.model} hold ${String(s.holdMs ?? 0)}ms`} r=${String(s.r)}`;
    case "admin":
      return `${String(s.atMs)} admin ${s.op} r=${String(s.r)}`;
    case "fault":
      return `${String(s.atMs)} fault ${s.fault} on ${s.target} for ${String(s.durationMs)}ms r=${String(s.r)}`;
    case "ha":
      return `${String(s.atMs)} ha ${s.fault} for ${String(s.durationMs)}ms r=${String(s.r)}`;
  }
}
