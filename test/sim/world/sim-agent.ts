import { Code, WardenError } from "@warden/common";
import type { FreeAnswer, FreeRequest, StartRequest, StopAnswer, StopRequest } from "@warden/loader";
import type { HeartbeatAnswer, HeartbeatReport } from "@warden/cluster";
import type { SimWorld } from "./sim-world.js";
import type { BackendBehaviour, TruthProcess } from "./ground-truth.js";
import { fenceJudges, judgeLeaderEpoch, type FencedCommand } from "../../../services/agent/src/leader-fence.js";
import type { AgentRecord, Registration, StartSink } from "./sim-agent-types.js";
import { gpuResources, inventoryEntries, orphansAndUsedBytes } from "./sim-inventory.js";
import { runStop } from "./sim-run-stop.js";
import { InventoryDeltaWriter } from "../../../services/agent/src/inventory-delta-writer.js";

// Re-exported: the coordinator and the world know these as the agent's.
export type { Registration, StartSink } from "./sim-agent-types.js";

/** The real agent's Heartbeat call timeout (node-heartbeat.ts `callTimeoutMs` default). */
const HEARTBEAT_CALL_TIMEOUT_MS = 5_000;

/** As the real agent's StartRegistry (services/agent/src/start-registry.ts). */
const maxRememberedStarts = 4096;

/**
 * One simulated node agent: records (incarnation → process), boot epoch and
 * per-boot sequence, StartBackend with spawn → loading → ready, StopBackend
 * with SIGTERM → grace → SIGKILL (idempotent, joins a stop in flight, names
 * one incarnation only), inventories with orphans, exit notifications,
 * crash with or without its records, and SIGSTOP/SIGCONT pauses.
 */
export class SimAgent {
  private readonly records = new Map<string, AgentRecord>();
  /** Exited records still to be shown once in an inventory. */
  private readonly exitedToReport = new Map<string, AgentRecord>();
  private readonly usedPorts = new Map<number, string>();
  /**
   * Every incarnation this agent ever spawned, kept across its restarts (the
   * real agent's StartRegistry: "incarnations are never started twice"). A
   * duplicated or reordered start message can reach the agent after that
   * incarnation's process exited and its record was dropped; without this it
   * spawned the incarnation a second time — something a real agent never does
   * (and a real connection never delivers a request twice, nor one of an old
   * boot to a new one), so Warden, which rightly never adopts an incarnation
   * its stop confirmed gone, was reported for amnesia (campaign seed 3488).
   */
  private readonly spawnedIncarnations = new Set<string>();
  private readonly everUsedPorts = new Set<number>();
  private gen = 0;
  up = true;
  pausedUntilMs = 0;
  private paused: (() => void)[] = [];
  bootEpoch: bigint;
  private sequence = 0n;
  /** The real agent's delta heartbeats (services/agent/src/inventory-delta-writer.ts), one per boot. */
  private writer = new InventoryDeltaWriter();
  /** Memory reading flaps between high and low while this is in the future (fault F16). */
  flapUntilMs = 0;
  private flapHigh = false;
  /** StopBackend answers only after its deadline while this is in the future (fault F2). */
  slowStopsUntilMs = 0;
  /**
   * The newest leader epoch a command brought (the real agent's fence,
   * services/agent/src/leader-fence.ts, same rule): on "disk", so it survives
   * a crash and a restart with records, and is lost with them (amnesia).
   */
  newestLeaderEpoch = 0n;
  /** Fault `agent-crash-before-record`: the next spawn before `untilMs` kills the agent before its record; back after `downMs`. */
  private crashBeforeRecord: { readonly untilMs: number; readonly downMs: number } | undefined;
  /** Planted fault for a two-coordinator simulation: the agent accepts commands from any epoch. */
  ignoresLeaderEpoch = false;

  constructor(
    private readonly w: SimWorld,
    readonly nodeId: string,
    readonly labels: Record<string, string>,
    readonly embedded: boolean,
    readonly memoryTotalBytes: number,
  ) {
    this.bootEpoch = BigInt(w.clock.wallNow()) * 1000n;
  }

  registration(): Registration {
    const maxReplicasPerModel = this.w.opts.nodes.find((n) => n.nodeId === this.nodeId)?.maxReplicasPerModel;
    return { nodeId: this.nodeId, address: `${this.nodeId}:7000`, labels: this.labels, bootEpoch: this.bootEpoch, embedded: this.embedded, backends: ["sim"], ...(maxReplicasPerModel === undefined ? {} : { limits: { maxReplicasPerModel } }) };
  }

  /** Runs `fn` now, or when the agent resumes from a pause; never after a crash of this boot. */
  private whenRunning(fn: () => void): void {
    const g = this.gen;
    const guarded = (): void => {
      if (g === this.gen && this.up) fn();
    };
    if (this.w.clock.now() < this.pausedUntilMs) this.paused.push(guarded);
    else guarded();
  }

  /** A timer of this boot (deferred while paused, dropped after a crash). */
  private after(ms: number, label: string, fn: () => void): void {
    const g = this.gen;
    this.w.queue.push(this.w.clock.now() + ms, label, () => {
      if (g === this.gen && this.up) this.whenRunning(fn);
    });
  }

  pause(untilMs: number): void {
    this.pausedUntilMs = Math.max(this.pausedUntilMs, untilMs);
    this.w.queue.push(untilMs, "agent.resume", () => {
      if (this.w.clock.now() < this.pausedUntilMs) return;
      const q = this.paused;
      this.paused = [];
      for (const f of q) f();
    });
  }

  /**
   * Starts the heartbeat loop of the current boot (registration first). Like
   * the real agent (services/agent/src/node-heartbeat.ts), one heartbeat is in
   * flight at a time: the next is sent one interval after the reply, or after
   * the call timeout when the request or the reply was lost. A loop that did
   * not wait let two inventories taken before a start both land after its
   * Ready (seed 97245).
   */
  boot(): void {
    this.writer = new InventoryDeltaWriter();
    this.w.sendRegister(this, this.registration());
    const g = this.gen;
    let beat = 0;
    const loop = (): void => {
      const mine = ++beat;
      const next = (): void => {
        // a reply that arrives after a crash, or after this beat's timeout, starts nothing
        if (g !== this.gen || mine !== beat) return;
        beat++;
        this.after(this.w.opts.heartbeatMs, "agent.heartbeat", loop);
      };
      const hb = this.heartbeat();
      this.w.sendHeartbeat(this, hb, (answer) => {
        this.whenRunning(() => {
          if (g === this.gen) this.answered(hb.sequence, answer);
          next();
        });
      });
      this.after(HEARTBEAT_CALL_TIMEOUT_MS, "agent.heartbeat-timeout", next);
    };
    this.after(this.w.rng.int(1, this.w.opts.heartbeatMs), "agent.heartbeat", loop);
  }

  /** Agent crash (fault F4/F5): backends keep running; records kept or lost. */
  crash(): void {
    this.gen++;
    this.up = false;
    this.paused = [];
  }

  /** Arms fault `agent-crash-before-record` (see {@link crashBeforeRecord}). */
  crashAtNextSpawn(untilMs: number, downMs: number): void {
    this.crashBeforeRecord = { untilMs, downMs };
  }

  /**
   * kill -9 between a backend's spawn and its record write: the process runs
   * on (loading, then ready) with no record; the start stream breaks
   * (UNAVAILABLE: the connection died with the agent, the Spawned never sent);
   * the agent restarts with its other records and reports the process as an
   * orphan, with the model from its mark.
   */
  private crashBetweenSpawnAndRecord(p: TruthProcess, behaviour: BackendBehaviour, sink: StartSink, downMs: number): void {
    this.crashBeforeRecord = undefined;
    this.w.coverage.hit("agent.crashed-before-record");
    this.w.log(`agent ${this.nodeId} killed after spawning ${p.model} pid ${String(p.pid)}, before its record`);
    this.w.queue.push(this.w.clock.now() + behaviour.loadMs, "backend.load", () => {
      if (p.phase !== "loading" || behaviour.hangs) return;
      if (behaviour.failsLoad) {
        this.w.truth.kill(p, this.w.clock.now());
        this.onProcessDied(p, "exit 1");
        return;
      }
      p.phase = "ready";
      p.readyAtMs = this.w.clock.now();
    });
    this.crash();
    sink.fail(new WardenError(Code.Unavailable, "StartBackend: connection reset (agent died)"));
    this.w.queue.push(this.w.clock.now() + downMs, "agent.restart", () => {
      if (!this.up) this.restart(true);
    });
  }

  restart(keepRecords: boolean): void {
    this.gen++;
    this.up = true;
    this.pausedUntilMs = 0;
    this.bootEpoch = BigInt(Math.floor(this.w.clock.wallNow())) * 1000n + BigInt(this.gen);
    this.sequence = 0n;
    if (!keepRecords) {
      this.records.clear();
      this.exitedToReport.clear();
      this.newestLeaderEpoch = 0n;
      this.w.coverage.hit("agent.restarted-amnesia");
    } else {
      this.w.coverage.hit("agent.restarted-records");
      for (const r of this.records.values()) {
        // The start stream died with the old agent: a load in progress is abandoned.
        if (r.state === "loading") this.exit(r, "SIGKILL");
        r.stopping = undefined;
        if (r.state === "stopping") r.state = "ready";
      }
    }
    this.usedPorts.clear();
    for (const p of this.w.truth.liveOn(this.nodeId)) this.usedPorts.set(Number(p.address.split(":")[1]), p.incarnation);
    this.boot();
  }

  // ------------------------------------------------------------- handlers

  /** The followed leader's announced epoch (a heartbeat answer) raises the fence without a command, as LeaderFence.raise. */
  raiseFence(epoch: bigint): void {
    if (epoch > this.newestLeaderEpoch) this.newestLeaderEpoch = epoch;
  }

  /** The fence, as the real agent's: the refusal of a command from an older epoch, else undefined (a newer one raises it). */
  private fenced(leaderEpoch: bigint, kind: FencedCommand, incarnation: string): WardenError | undefined {
    // Planted bug "free-past-fence" (fenceJudges, as the real agent's FreeBackend): applied unjudged.
    if (!fenceJudges(kind)) {
      this.w.onFence?.({ nodeId: this.nodeId, kind, epoch: leaderEpoch, newestBefore: this.newestLeaderEpoch, accepted: true, incarnation });
      return undefined;
    }
    const v = judgeLeaderEpoch(this.newestLeaderEpoch, leaderEpoch);
    this.w.onFence?.({ nodeId: this.nodeId, kind, epoch: leaderEpoch, newestBefore: this.newestLeaderEpoch, accepted: v.t === "accept" || this.ignoresLeaderEpoch, incarnation });
    if (v.t === "refuse") return this.ignoresLeaderEpoch ? undefined : v.error;
    this.newestLeaderEpoch = v.newestSeen;
    return undefined;
  }

  handleStart(req: StartRequest, sink: StartSink, behaviour: BackendBehaviour, memoryBytes: number, leaderEpoch = 0n, sentStale = false): { cancel(): void } {
    let cancelled = false;
    let rec: AgentRecord | undefined;
    this.whenRunning(() => {
      if (cancelled) return;
      const refused = this.fenced(leaderEpoch, "start", req.incarnation);
      if (refused !== undefined) {
        sink.fail(refused);
        return;
      }
      // A repeat of an incarnation already spawned (running or gone): never a second process.
      // The real agent attaches the repeat call to the start (StartRegistry: its event log
      // replayed to that call), or answers EXITED once the process is gone; here either answer
      // would reach the original call's stream, which that call never sent, so it is dropped.
      // (Seed 1406 with replicas on: a duplicated start message answered "failed ALREADY_EXISTS"
      // on the original stream ahead of its Spawned; the loader rightly gave the load up and
      // the process it had started ran on, held by nobody.)
      if (this.records.has(req.incarnation) || this.spawnedIncarnations.has(req.incarnation)) return;
      if (sentStale) this.w.onStaleEffect?.(`${this.nodeId} started ${req.model} ${req.incarnation} on a command of epoch ${leaderEpoch.toString()}`);
      this.rememberSpawned(req.incarnation);
      let port = 20000;
      while (this.usedPorts.has(port)) port++;
      if (this.everUsedPorts.has(port)) this.w.coverage.hit("port.recycled");
      this.everUsedPorts.add(port);
      this.usedPorts.set(port, req.incarnation);
      const address = `${this.nodeId}:${String(port)}`;
      const p = this.w.truth.spawn({ nodeId: this.nodeId, address, incarnation: req.incarnation, model: req.model, memoryBytes, behaviour, spawnedAtMs: this.w.clock.now() });
      const crashNow = this.crashBeforeRecord;
      if (crashNow !== undefined && this.w.clock.now() <= crashNow.untilMs) {
        this.crashBetweenSpawnAndRecord(p, behaviour, sink, crashNow.downMs);
        return;
      }
      const r: AgentRecord = { incarnation: req.incarnation, model: req.model, backend: req.backend, loadDigest: req.loadDigest ?? "", process: p, state: "loading", stopRequested: undefined, stopping: undefined };
      rec = r;
      this.records.set(req.incarnation, r);
      // The agent's own readiness deadline: a start outlives its caller's stream, not this.
      this.after(this.w.opts.agentReadinessTimeoutMs, "agent.readiness-timeout", () => {
        if (this.records.get(r.incarnation) === r && r.state === "loading") {
          this.w.coverage.hit("agent.readiness-timeout");
          this.exit(r, "SIGKILL");
          sink.emit({ t: "failed", code: "READINESS_TIMEOUT", message: "backend not ready in time", exitCode: undefined, lastStderrLine: "" });
          sink.end();
        }
      });
      // The last report stamped when the record appeared, like the real agent's Spawned (report-sequence.ts).
      sink.emit({ t: "spawned", address, pid: p.pid, gpu: 0, reportFloor: { bootEpoch: this.bootEpoch, sequence: this.sequence } });
      sink.emit({ t: "loading" });
      // The process's own progress: independent of the agent's boot.
      this.w.queue.push(this.w.clock.now() + behaviour.loadMs, "backend.load", () => {
        if (p.phase !== "loading") return;
        if (behaviour.hangs) return;
        if (behaviour.failsLoad) {
          // Whether the record is still this start's must be read before the exit drops it
          // (checking after, the failure was never reported: seed 14857).
          const ours = this.records.get(r.incarnation) === r;
          this.w.truth.kill(p, this.w.clock.now());
          this.w.coverage.hit("load.failed");
          this.onProcessDied(p, "exit 1");
          if (ours) {
            this.whenRunning(() => {
              sink.emit({ t: "failed", code: "LOAD_FAILED", message: "backend exited during load", exitCode: 1, lastStderrLine: "model file corrupt" });
              sink.end();
            });
          }
          return;
        }
        p.phase = "ready";
        p.readyAtMs = this.w.clock.now();
        if (behaviour.crashAfterMs !== undefined) {
          this.w.queue.push(this.w.clock.now() + behaviour.crashAfterMs, "backend.crash", () => {
            if (p.phase === "dead") return;
            this.w.truth.kill(p, this.w.clock.now());
            this.w.coverage.hit("backend.crashed");
            this.onProcessDied(p, "SIGSEGV");
          });
        }
        this.whenRunningIfSameRecord(r, () => {
          if (r.state === "loading") r.state = "ready";
          sink.emit({ t: "ready", address, memoryBytes });
          sink.end();
        });
      });
    });
    return {
      cancel: () => {
        cancelled = true;
        this.whenRunning(() => {
          // A cancelled start: the agent kills a process that is not ready yet.
          if (rec !== undefined && rec.state === "loading" && this.records.get(rec.incarnation) === rec) this.exit(rec, "SIGKILL");
        });
      },
    };
  }

  /** Bounded like the real agent's StartRegistry; forgets the oldest of gone backends first. */
  private rememberSpawned(incarnation: string): void {
    this.spawnedIncarnations.add(incarnation);
    if (this.spawnedIncarnations.size <= maxRememberedStarts) return;
    for (const k of this.spawnedIncarnations) {
      if (this.spawnedIncarnations.size <= maxRememberedStarts) break;
      if (!this.records.has(k)) this.spawnedIncarnations.delete(k);
    }
  }

  private whenRunningIfSameRecord(r: AgentRecord, fn: () => void): void {
    this.whenRunning(() => {
      if (this.records.get(r.incarnation) === r) fn();
    });
  }

  /** StopBackend: idempotent per incarnation; never touches another one. */
  handleStop(req: StopRequest, reply: (r: StopAnswer | WardenError) => void, leaderEpoch = 0n, sentStale = false): void {
    this.whenRunning(() => {
      const refused = this.fenced(leaderEpoch, "stop", req.incarnation);
      if (refused !== undefined) {
        reply(refused);
        return;
      }
      const r = this.records.get(req.incarnation);
      if (r === undefined || r.state === "exited" || r.process.phase === "dead") {
        const other = this.usedPorts.get(Number(req.address.split(":")[1]));
        reply({ t: "alreadyGone", replacedBy: other !== undefined && other !== req.incarnation ? other : "" });
        return;
      }
      if (sentStale) this.w.onStaleEffect?.(`${this.nodeId} stopped ${r.model} ${r.incarnation} on a command of epoch ${leaderEpoch.toString()}`);
      r.stopRequested ??= { reason: req.reason, atMs: this.w.clock.now() };
      if (r.stopping === undefined) {
        const stopping = runStop({ w: this.w, after: (ms, label, fn) => { this.after(ms, label, fn); }, exit: (rec, signal) => { this.exit(rec, signal); } }, r, req.force);
        r.stopping = stopping;
        // A failed stop may be asked again.
        stopping.catch(() => {
          if (r.stopping === stopping) r.stopping = undefined;
        });
      }
      const slow = this.w.clock.now() < this.slowStopsUntilMs;
      r.stopping.then(
        (a) => {
          if (slow) this.after(this.w.opts.stopRpcTimeoutMs + 1_000, "agent.slow-stop", () => { reply(a); });
          else reply(a);
        },
        (err: unknown) => { reply(err instanceof WardenError ? err : new WardenError(Code.Internal, String(err))); },
      );
    });
  }

  /**
   * FreeBackend (the HA world's `freeReachesBackend`): fenced like every
   * command, then Free() on the backend this agent started, named by
   * incarnation — its model unloaded in ground truth. As the real agent: a
   * process stopping or gone is alreadyGone, one still loading is refused.
   */
  handleFree(req: FreeRequest, reply: (r: FreeAnswer | WardenError) => void, leaderEpoch = 0n, sentStale = false): void {
    this.whenRunning(() => {
      const refused = this.fenced(leaderEpoch, "free", req.incarnation);
      if (refused !== undefined) {
        reply(refused);
        return;
      }
      const r = this.records.get(req.incarnation);
      if (r === undefined || r.state === "exited" || r.state === "stopping" || r.stopping !== undefined || r.process.phase === "dead") {
        reply({ t: "alreadyGone" });
        return;
      }
      if (r.process.address !== req.address) {
        reply(new WardenError(Code.InvalidArgument, `address: incarnation ${req.incarnation} listens on ${r.process.address}, not ${req.address}`));
        return;
      }
      if (r.state !== "ready") {
        reply(new WardenError(Code.FailedPrecondition, `incarnation ${req.incarnation} is ${r.state}, not ready: nothing freed`));
        return;
      }
      const p = r.process;
      if (p.freedBy === undefined) {
        p.freedBy = { epoch: leaderEpoch, atMs: this.w.clock.now() };
        this.w.coverage.hit("ha.backend-freed");
        this.w.log(`free ${req.address} ${p.incarnation} on a command of epoch ${leaderEpoch.toString()}`);
        if (sentStale) this.w.onStaleEffect?.(`${this.nodeId} freed ${p.model} ${p.incarnation} at ${req.address} on a command of epoch ${leaderEpoch.toString()}`);
      }
      reply({ t: "freed" });
    });
  }

  /** The record's process is gone: report the exit once in the next inventory and on the exit watch. */
  private exit(r: AgentRecord, signal: string): void {
    if (r.process.phase !== "dead") this.w.truth.kill(r.process, this.w.clock.now());
    if (r.state === "exited") return;
    r.state = "exited";
    this.records.delete(r.incarnation);
    this.exitedToReport.set(r.incarnation, r);
    const port = Number(r.process.address.split(":")[1]);
    if (this.usedPorts.get(port) === r.incarnation) this.usedPorts.delete(port);
    this.w.sendExit(this, r.incarnation, { exitCode: undefined, signal, intentional: r.stopRequested !== undefined, lastStderrLine: "" });
  }

  /** A process died by itself (crash, failed load): its record, if any, shows it exited. */
  onProcessDied(p: TruthProcess, signal: string): void {
    const r = this.records.get(p.incarnation);
    if (r !== undefined && r.process === p) this.exit(r, signal);
    else {
      const port = Number(p.address.split(":")[1]);
      if (this.usedPorts.get(port) === p.incarnation) this.usedPorts.delete(port);
    }
  }

  handleIsRunning(incarnation: string, reply: (running: boolean) => void): void {
    this.whenRunning(() => {
      const r = this.records.get(incarnation);
      reply(r !== undefined && r.process.phase !== "dead");
    });
  }

  /** StopOrphan: the agent re-checks that the pid is still a live orphan. */
  handleStopOrphan(pid: number, reply: (r: { alreadyGone: boolean } | WardenError) => void, leaderEpoch = 0n, sentStale = false): void {
    this.whenRunning(() => {
      const refused = this.fenced(leaderEpoch, "stopOrphan", String(pid));
      if (refused !== undefined) {
        reply(refused);
        return;
      }
      const p = this.w.truth.processes.get(pid);
      if (p === undefined || p.phase === "dead" || p.nodeId !== this.nodeId || this.records.has(p.incarnation)) {
        reply({ alreadyGone: true });
        return;
      }
      if (this.w.clock.now() < p.unkillableUntilMs) {
        reply(new WardenError(Code.Internal, `orphan ${String(pid)} will not die`));
        return;
      }
      if (sentStale) this.w.onStaleEffect?.(`${this.nodeId} killed orphan ${p.model} ${p.incarnation} on a command of epoch ${leaderEpoch.toString()}`);
      this.w.truth.kill(p, this.w.clock.now());
      this.onProcessDied(p, "SIGKILL");
      this.w.coverage.hit("orphan.stopped");
      reply({ alreadyGone: false });
    });
  }

  // ------------------------------------------------------------ reports

  /** The coordinator's answer to this boot's heartbeat `sequence`, as the real agent takes it. */
  answered(sequence: bigint, answer: HeartbeatAnswer): void {
    if (answer === "ok") this.writer.acknowledged(sequence);
    else this.writer.reset();
    if (answer === "send-full") this.w.coverage.hit("heartbeat.full-requested");
  }

  heartbeat(): HeartbeatReport {
    this.sequence++;
    const entries = inventoryEntries([...this.records.values(), ...this.exitedToReport.values()]);
    const part = this.writer.build(this.sequence, entries, this.w.clock.now());
    const backends = part.t === "full" ? part.backends : [];
    if (part.t === "delta") this.w.coverage.hit("heartbeat.delta");
    this.exitedToReport.clear();
    const live = orphansAndUsedBytes(this.w.truth.liveOn(this.nodeId), (incarnation) => this.records.has(incarnation));
    const orphans = live.orphans;
    let used = live.used;
    if (this.w.clock.now() < this.flapUntilMs) {
      this.flapHigh = !this.flapHigh;
      if (this.flapHigh) used = Math.floor(this.memoryTotalBytes * 0.99);
    }
    const resources = gpuResources(this.memoryTotalBytes, used);
    const hb: HeartbeatReport = { nodeId: this.nodeId, bootEpoch: this.bootEpoch, sequence: this.sequence, backends, ...(part.t === "delta" ? { delta: part.delta } : {}), orphans, resources };
    this.w.inventoryOf.set(hb, entries);
    return hb;
  }

  /** Whether the agent holds a record for the incarnation (ground truth for the orphan rules). */
  hasRecord(incarnation: string): boolean {
    return this.records.has(incarnation);
  }
}
