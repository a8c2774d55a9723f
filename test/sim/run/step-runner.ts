import { priorityClasses } from "@warden/admission";
import { deadlineSignal, sleep } from "@warden/common";
import { AdmissionGate } from "../../../services/coordinator/src/routing/admission-gate.js";
import type { SimCoordinator } from "../coordinator/sim-coordinator.js";
import type { Lease } from "@warden/loader";
import { SimRandom } from "../kernel/sim-random.js";
import type { Harness } from "./harness.js";
import type { Step } from "./plan.js";
import { injectFault } from "./fault-injector.js";

let nextRequestId = 1;

/** Prompt prefixes of calls to models routed by prefix: a few, so calls share them (two blocks each). */
const sharedPrefixes = ["a".repeat(128), "b".repeat(128), "c".repeat(128)];

/** Each coordinator generation's admission gate (a new leader starts with an empty one, as in production). */
const gates = new WeakMap<SimCoordinator, AdmissionGate>();
/** Numbers the gates (the checker keeps one fair-share account per gate and model). */
let gatesMade = 0;

function gateOf(h: Harness, c: SimCoordinator): AdmissionGate | undefined {
  const settings = h.opts.admission;
  if (settings === undefined) return undefined;
  let g = gates.get(c);
  if (g === undefined) {
    const gateNo = ++gatesMade;
    g = new AdmissionGate({
      settingsOf: (m) => settings[m],
      replicasOf: (m) => {
        const st = c.loader.replicaStatus(m);
        return st === undefined ? 0 : st.ready + st.loading;
      },
      observe: (o) => {
        h.onAdmission(o, gateNo);
      },
    });
    gates.set(c, g);
  }
  return g;
}

/**
 * One inference call through loader routing leases, as InferenceService does:
 * acquire, run against the backend, complete in `finally`; a backend that is
 * gone answers UNAVAILABLE, which is reported unless a stop explains it.
 * Cancels, deadlines and double completions come from the step's seed.
 */
async function call(h: Harness, r: SimRandom, step: Extract<Step, { kind: "call" }>): Promise<void> {
  const c = h.coord;
  if (c === undefined) return;
  const w = h.world;
  const models = c.loader.modelSpecs();
  if (models.length === 0) return;
  const model = step.model ?? r.pick(models).id;
  const deadlineMs = r.chance(0.2) ? r.int(500, 20_000) : 120_000;
  // Chained by hand, not AbortSignal.any: Node keeps a composite signal with a
  // listener in a process-wide set until it aborts, and a seed ends with calls
  // still waiting on virtual timers that never fire — every finished world
  // stayed reachable from it (~0.85 MB a seed; a campaign worker ran out of heap).
  const ctl = new AbortController();
  const dl = deadlineSignal(c.clock, deadlineMs, "call", ctl.signal);
  const cancelAtMs = r.chance(0.1) ? r.int(10, 10_000) : undefined;
  const signal = dl.signal;
  if (cancelAtMs !== undefined) c.clock.setTimer(cancelAtMs, () => { ctl.abort(); });
  // Models with an admission gate: the call takes its place first (class and caller from a stream of their own).
  const gate = gateOf(h, c);
  let release: (() => void) | undefined;
  if (gate !== undefined && h.opts.admission?.[model] !== undefined) {
    const ar = new SimRandom(step.r).fork("admission");
    const waiting = gate.enter(model, { cls: ar.pick(priorityClasses), principal: ar.pick(["p1", "p2", "p3"]) }, signal);
    try {
      release = await waiting;
      w.coverage.hit("admission.admitted");
    } catch {
      w.coverage.hit("admission.refused-or-gave-up");
      dl.cleanup();
      return;
    }
  }
  try {
    await leased(h, r, step, c, model, ctl, dl);
  } finally {
    release?.();
  }
}

async function leased(h: Harness, r: SimRandom, step: Extract<Step, { kind: "call" }>, c: SimCoordinator, model: string, ctl: AbortController, dl: ReturnType<typeof deadlineSignal>): Promise<void> {
  const w = h.world;
  const signal = dl.signal;
  // Under `routing: prefix`, the call carries a prompt (one of a few shared prefixes) and
  // the production route hint; drawn only for such models, so other seeds draw what they did.
  const prefixHint = c.loader.modelSpec(model)?.routing.mode === "prefix" ? c.prefix.hint(model, () => ({ Prompt: `${sharedPrefixes[r.int(0, sharedPrefixes.length - 1)] ?? ""} call ${String(r.int(0, 9))}` })) : undefined;
  const hint =
    prefixHint === undefined
      ? undefined
      : {
          prefer: (candidates: Parameters<typeof prefixHint.prefer>[0], leastLoaded: string): string | undefined => {
            const id = prefixHint.prefer(candidates, leastLoaded);
            const routing = c.loader.modelSpec(model)?.routing;
            const marginCalls = routing?.mode === "prefix" ? routing.balanceMarginCalls : 0;
            h.onPrefixPick({ model, candidates: candidates.map((x) => ({ incarnation: x.incarnation, inFlight: x.inFlight })), chosen: id, marginCalls });
            // Affinity overrode the least loaded: the case the routing checker must see hold too.
            if (id !== leastLoaded) w.coverage.hit("route.prefix-elsewhere");
            return id;
          },
          routed: (inc: string): void => {
            prefixHint.routed(inc);
          },
        };
  let lease: Lease;
  try {
    lease = await c.loader.acquire(model, signal, hint);
  } catch {
    dl.cleanup();
    return;
  }
  if (hint !== undefined) {
    hint.routed(lease.incarnation);
    w.coverage.hit("route.prefix-hinted");
  }
  if (h.coord !== c) return;
  const id = nextRequestId++;
  w.truth.openRequests.set(id, { id, incarnation: lease.incarnation, address: lease.address, model, startedAtMs: w.clock.now() });
  h.onLease(lease);
  const p = w.truth.byIncarnation.get(lease.incarnation);
  const done = (): void => {
    w.truth.openRequests.delete(id);
    lease.complete();
    h.openCompletions.delete(id);
    if (r.chance(0.05)) {
      lease.complete();
      w.coverage.hit("lease.completed-twice");
    }
  };
  h.openCompletions.set(id, () => {
    w.truth.openRequests.delete(id);
    lease.complete();
  });
  try {
    const durMs = (step.holdMs ?? r.int(20, 3_000)) * (p?.behaviour.slowFactor ?? 1);
    await sleep(c.clock, durMs, signal);
    // HA: the generation was superseded (a zombie) but its backend answered: the call ends there too.
    if (h.coord !== c) {
      lease.complete();
      return;
    }
    if (p === undefined || p.phase === "dead" || p.address !== lease.address) {
      // UNAVAILABLE from the backend.
      if (c.loader.isBeingStopped(lease.incarnation)) {
        done();
        return;
      }
      done();
      await c.loader.reportUnavailable(lease.incarnation).catch(() => undefined);
      return;
    }
    done();
  } catch {
    if (h.coord !== c) return;
    w.coverage.hit(ctl.signal.aborted ? "request.cancelled" : "request.deadline");
    done();
  } finally {
    dl.cleanup();
  }
}

async function admin(h: Harness, step: Extract<Step, { kind: "admin" }>, r: SimRandom): Promise<void> {
  const c = h.coord;
  if (c === undefined) return;
  const w = h.world;
  const loader = c.loader;
  const models = loader.modelSpecs();
  const nodes = c.nodes.list();
  switch (step.op) {
    case "load": {
      if (models.length === 0) return;
      const spec = r.pick(models);
      const node = r.chance(0.3) && nodes.length > 0 ? r.pick(nodes).nodeId : undefined;
      const dl = deadlineSignal(c.clock, 300_000, "admin load");
      // An operator's LoadModel on a named node places there, past spread and maxReplicasPerModel (the replica checker exempts it).
      if (node === undefined) await loader.ensureLoaded(spec.id, dl.signal).catch(() => undefined);
      else await w.truth.explicitLoad(spec.id, node, () => loader.ensureLoaded(spec.id, dl.signal, node));
      dl.cleanup();
      return;
    }
    case "unload":
    case "unload-force": {
      if (models.length === 0) return;
      const outcome = await loader.unload(r.pick(models).id, { force: step.op === "unload-force", reason: "admin" }).catch(() => undefined);
      if (outcome !== undefined) w.coverage.hit(`unload.${outcome.t}`);
      return;
    }
    case "drain": {
      const n = nodes.length > 0 ? r.pick(nodes) : undefined;
      if (n === undefined || n.draining) return;
      n.draining = true;
      w.coverage.hit("node.drained");
      // The production path (admin-service DrainNode): replicas keeping a model at min move first.
      await loader.drainNode(n.nodeId, { force: r.chance(0.3), stillDraining: () => n.draining }).catch(() => undefined);
      return;
    }
    case "undrain":
      for (const n of nodes) n.draining = false;
      return;
    case "declare-lost": {
      const n = nodes.find((x) => x.state === "unreachable" && !x.embedded);
      if (n === undefined) return;
      w.truth.declaredLost.add(n.nodeId);
      c.nodes.declareLost(n, true, "sim operator");
      w.coverage.hit("node.declared-lost-by-operator");
      return;
    }
    case "forget": {
      const held = loader.heldInstances();
      const leftovers = loader.leftoverList();
      const all = [...held.map((x) => x.incarnation), ...leftovers.map((x) => x.incarnation)];
      if (all.length === 0) return;
      const inc = r.pick(all);
      if (loader.forget(inc, "sim", "operator forget")) {
        w.truth.forgotten.add(inc);
        w.truth.forgottenAfterRequestId.set(inc, nextRequestId - 1);
        w.coverage.hit("instance.forgotten");
      }
      return;
    }
    case "policy": {
      try {
        loader.updatePolicy({
          limitPerNode: r.pick([0, 1, 2, 3]),
          idleCheck: r.chance(0.5),
          idleTimeoutMs: r.int(30, 600) * 1_000,
          busyCheck: r.chance(0.4),
          forceEvictionWhenBusy: r.chance(0.3),
          memoryReclaimer: r.chance(0.4),
        });
        w.coverage.hit("policy.changed");
      } catch {
        // validated whole: nothing changed
      }
      return;
    }
    case "reload": {
      // A changed option is a new load revision: the running replicas of that model are rolled out.
      // A lowered max scales the model down to it promptly.
      const next = h.opts.models
        .filter(() => r.chance(0.85))
        .map((m) => (r.chance(0.2) ? { ...m, pinned: !m.pinned } : m))
        .map((m) => (r.chance(0.25) ? { ...m, options: [...m.options, `rev:${String(r.int(1, 3))}`] } : m))
        // A lowered max (replicated models only: a seed without them draws what it drew before): the excess is stopped promptly.
        .map((m) => (m.replicas.max > 1 && r.chance(0.3) ? { ...m, replicas: { ...m.replicas, max: Math.max(m.replicas.min, 1, r.int(1, m.replicas.max - 1)) } } : m));
      await Promise.all(loader.setModels(next));
      w.coverage.hit("config.reloaded");
      return;
    }
  }
}

/** Schedules every step of the plan on the event queue. */
export function schedulePlan(h: Harness, plan: readonly Step[]): void {
  for (const s of plan) {
    h.world.queue.push(s.atMs, s.kind, () => {
      const r = new SimRandom(s.r);
      // HA profile: a call or admin request to a stopped leader waits in its socket until it resumes (then it
      // goes to whoever leads by then: clients follow the leader).
      const c = h.coord;
      if (h.ha !== undefined && c !== undefined && c.clock.paused() && (s.kind === "call" || s.kind === "admin")) {
        h.world.coverage.hit("ha.request-waited-on-paused-leader");
        c.clock.run(() => {
          if (s.kind === "call") void call(h, r, s);
          else void admin(h, s, r);
        });
        return;
      }
      switch (s.kind) {
        case "call":
          void call(h, r, s);
          return;
        case "admin":
          h.world.log(`admin ${s.op}`);
          void admin(h, s, r);
          return;
        case "fault":
          h.world.log(`fault ${s.fault} ${s.target}`);
          h.world.coverage.hit(`fault.${s.fault}`);
          injectFault(h, s, r);
          return;
        case "ha":
          h.world.log(`ha-fault ${s.fault}`);
          h.ha?.inject(s.fault, s.durationMs, r);
          return;
      }
    });
  }
}
