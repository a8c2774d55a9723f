import type { SimRandom } from "../kernel/sim-random.js";
import type { Harness } from "./harness.js";
import type { Step } from "./plan.js";

type FaultStep = Extract<Step, { kind: "fault" }>;

/** Starts an explicit stop of a ready instance on `nodeId`, so a stop fault has a stop to hit. */
function stopSomething(h: Harness, nodeId: string, r: SimRandom, force: boolean): void {
  const c = h.coord;
  if (c === undefined) return;
  const on = c.loader.heldInstances().filter((x) => x.nodeId === nodeId && x.phase === "ready");
  if (on.length === 0) return;
  void c.loader.stopInstance(r.pick(on).incarnation, { force, reason: "admin" }).catch(() => undefined);
}

function restartCoordinatorLater(h: Harness, downMs: number): void {
  const w = h.world;
  w.queue.push(w.clock.now() + downMs, "coordinator.restart", () => {
    if (h.coord !== undefined || h.booting) return;
    const torn = w.disk.crash();
    if (torn > 0) w.coverage.hit("journal.torn-tail");
    void h.startCoordinator(torn);
  });
}

/**
 * Applies one fault from the plan (reliability.md F-table).
 * Every fault is bounded by its duration; the quiescence phase clears them all.
 */
export function injectFault(h: Harness, s: FaultStep, r: SimRandom): void {
  const w = h.world;
  const now = w.clock.now();
  const until = now + s.durationMs;
  const agent = w.agents.get(s.target);
  if (agent === undefined) return;
  const remote = !agent.embedded;
  switch (s.fault) {
    case "stop-error":
    case "remote-stop-fails-after-local-drop":
      for (const p of w.truth.live()) if (p.nodeId === s.target) p.unkillableUntilMs = until;
      stopSomething(h, s.target, r, r.chance(0.5));
      return;
    case "stop-deadline":
      agent.slowStopsUntilMs = until;
      stopSomething(h, s.target, r, false);
      return;
    case "stop-reply-lost":
      if (!remote) return;
      stopSomething(h, s.target, r, true);
      w.queue.push(now + w.opts.link.baseDelayMs + w.opts.link.jitterMs + 1, "fault.reply-cut", () => {
        w.net.partition(s.target, ["toCoordinator"], w.clock.now() + Math.min(s.durationMs, 20_000));
      });
      return;
    case "stop-blocked-by-load": {
      const c = h.coord;
      if (c === undefined) return;
      const held = new Set(c.loader.heldInstances().map((x) => x.model));
      const spec = c.loader.modelSpecs().find((m) => !held.has(m.id));
      if (spec === undefined) return;
      w.slowUntilMs = Math.max(w.slowUntilMs, now + 5_000);
      const ctl = new AbortController();
      void c.loader.ensureLoaded(spec.id, ctl.signal).catch(() => undefined);
      c.clock.setTimer(r.int(100, 3_000), () => {
        void c.loader.unload(spec.id, { force: false, reason: "admin", stopTimeoutMs: 2_000 }).then(
          (o) => { w.coverage.hit(`stop-vs-load.${o.t}`); },
          () => { w.coverage.hit("stop-vs-load.lock-timeout"); },
        );
      });
      return;
    }
    case "agent-crash-records":
    case "agent-crash-amnesia": {
      if (!remote || !agent.up) return;
      agent.crash();
      w.queue.push(until, "agent.restart", () => {
        if (!agent.up) agent.restart(s.fault === "agent-crash-records");
      });
      return;
    }
    case "agent-crash-before-record":
      // Armed: the agent's next spawn before `until` kills it before the record is written.
      if (!remote || !agent.up) return;
      agent.crashAtNextSpawn(until, r.int(500, Math.min(s.durationMs, 20_000)));
      return;
    case "agent-paused":
      if (!remote) return;
      agent.pause(until);
      stopSomething(h, s.target, r, false);
      return;
    case "partition-symmetric": {
      if (!remote) return;
      // Swizzle: cut this link and, sometimes, more; they heal at different times.
      w.net.partition(s.target, ["toAgent", "toCoordinator"], until);
      for (const n of w.opts.nodes) if (!n.embedded && n.nodeId !== s.target && r.chance(0.3)) w.net.partition(n.nodeId, ["toAgent", "toCoordinator"], now + r.int(1_000, s.durationMs));
      return;
    }
    case "partition-asymmetric":
      if (!remote) return;
      w.net.partition(s.target, [r.chance(0.5) ? "toAgent" : "toCoordinator"], until);
      return;
    case "coordinator-crash":
      if (h.ha !== undefined) {
        // HA profile: kill -9 of the leader's process; the standby takes over (no torn tail: the stream acks on a quorum).
        stopSomething(h, s.target, r, r.chance(0.5));
        h.ha.crashLeader(r, r.int(500, Math.min(s.durationMs, 30_000)));
        return;
      }
      if (h.coord === undefined) return;
      // Mid-eviction: a stop just started, and the crash cuts its journal tail.
      stopSomething(h, s.target, r, r.chance(0.5));
      w.queue.push(now + r.int(0, 3), "coordinator.crash", () => {
        h.crashCoordinator();
        if (remote && r.chance(0.5)) w.net.partition(s.target, ["toAgent", "toCoordinator"], w.clock.now() + r.int(5_000, 60_000));
        restartCoordinatorLater(h, r.int(500, Math.min(s.durationMs, 30_000)));
      });
      return;
    case "journal-torn-tail":
      if (h.ha !== undefined) {
        stopSomething(h, s.target, r, true);
        h.ha.crashLeader(r, r.int(500, 5_000));
        return;
      }
      if (h.coord === undefined) return;
      stopSomething(h, s.target, r, true);
      w.queue.push(now + 0.5, "coordinator.crash", () => {
        h.crashCoordinator();
        restartCoordinatorLater(h, r.int(500, 5_000));
      });
      return;
    case "stale-inventory": {
      const hb = w.staleHeartbeat(s.target);
      if (hb === undefined) return;
      w.sendStaleHeartbeat(agent, hb);
      return;
    }
    case "backend-crash": {
      w.crashUntilMs = Math.max(w.crashUntilMs, until);
      const live = w.truth.live().filter((p) => p.nodeId === s.target);
      if (live.length === 0) return;
      const p = r.pick(live);
      w.truth.kill(p, now);
      w.coverage.hit("backend.crashed");
      agent.onProcessDied(p, "SIGSEGV");
      return;
    }
    case "slow-backend":
      w.slowUntilMs = Math.max(w.slowUntilMs, until);
      return;
    case "port-recycled": {
      const live = w.truth.live().filter((p) => p.nodeId === s.target && p.phase === "ready");
      const c = h.coord;
      if (live.length === 0 || c === undefined) return;
      const p = r.pick(live);
      w.truth.kill(p, now);
      agent.onProcessDied(p, "SIGSEGV");
      const spec = c.loader.modelSpecs().find((m) => m.id !== p.model);
      // A load naming the node (as an operator's LoadModel would), to reuse the recycled port: placement rules do not apply to it.
      if (spec !== undefined) void w.truth.explicitLoad(spec.id, s.target, () => c.loader.ensureLoaded(spec.id, new AbortController().signal, s.target));
      return;
    }
    case "nats-outage-long":
      w.nats.ackLossP = 0.5;
      w.queue.push(now + 3_000, "nats.outage", () => {
        w.nats.ackLossP = 0;
        // Longer than the de-dup window: a copy stored before it is re-published after it.
        w.nats.outage(w.clock.now() + s.durationMs + w.opts.natsDupWindowMs + 10_000);
      });
      return;
    case "nats-ack-lost":
      w.nats.ackLossP = 0.3;
      w.queue.push(until, "nats.ack-ok", () => (w.nats.ackLossP = 0));
      return;
    case "completion-twice":
      h.completeSomeEarly(r);
      return;
    case "memory-flap":
      agent.flapUntilMs = until;
      return;
    case "wall-clock-jump":
      w.clock.jumpWall(r.chance(0.5) ? 3_600_000 : -3_600_000);
      return;
    case "event-loop-stall":
      w.stall.untilMs = Math.max(w.stall.untilMs, now + 30_000);
      return;
  }
}
