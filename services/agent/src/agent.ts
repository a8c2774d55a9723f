import { setMaxListeners } from "node:events";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, WardenError, abortReason, deadlineSignal, invalidArgument, nullLogger, raceSignal, sleep, systemClock, type Cancel, type Clock, type Logger } from "@warden/common";
import { createClient, type Client, type ServiceImpl } from "@warden/grpc";
import { Backend, StartFailureCode, type AgentService, type NodeResourcesSchema, type StopBackendResponseSchema } from "@warden/proto";
import type { AgentConfig, CatalogEntry } from "./agent-config.js";
import { BackendLogs } from "./backend-logs.js";
import { BackendProcess, type BackendPhase } from "./backend-process.js";
import type { BackendRecord, PartialRecord } from "./backend-record.js";
import { createMemoryProbe, type MemoryReading } from "./memory-probe.js";
import { HealthMonitor } from "./health-monitor.js";
import { isAborted } from "./is-aborted.js";
import { ModelLocks } from "./model-lock.js";
import { scanPortRange, type Foreign, type Orphan } from "./orphan-scan.js";
import { stopOrphanProcess } from "./orphan-stop.js";
import { PortAllocator } from "./port-allocator.js";
import { agentMarkOf, classifyEnviron, markEnv, markVars } from "./process-mark.js";
import { isSameProcessAlive, readEnviron, readPidStat } from "./proc-fs.js";
import { adoptProcess, spawnBackend } from "./process-handle.js";
import { foreignOf, inventoryEntryOf, orphanOf, startResponseOf, type ForeignInit, type InventoryEntryInit, type OrphanInit, type StartResponseInit, type WatchEventInit } from "./proto-views.js";
import { waitReady, tcpProbe } from "./readiness.js";
import { RecordStore } from "./record-store.js";
import { checkAddress, checkId, checkIncarnation, checkOptions, checkText } from "./request-validation.js";
import { StartLog, type StartEvent } from "./start-log.js";
import { WatchHub } from "./watch-hub.js";

/** Injected ports; all optional. */
export interface AgentDeps {
  /** @default systemClock */
  clock?: Clock;
  /** @default nullLogger */
  logger?: Logger;
  /** Environment the catalog's allow-list draws from. @default process.env */
  env?: Readonly<Record<string, string | undefined>>;
  /** @default "/proc" (tests point it elsewhere only for pure parsing) */
  procRoot?: string;
}

/** What `start()` found in the state dir. */
export interface AdoptionReport {
  adopted: string[];
  /** Incarnations whose process was dead (or a recycled pid): records removed. */
  forgotten: string[];
  /** Adopted mid-start (the start that owned them died with the old agent): stopped. */
  stoppedUnfinished: string[];
  orphans: Orphan[];
}

/** The agent's inventory at one moment. */
export interface InventorySnapshot {
  backends: InventoryEntryInit[];
  orphans: OrphanInit[];
  /** Listeners in the port range this agent did not start (last scan): never signalled. */
  foreign: ForeignInit[];
  bootEpochMs: number;
}

export type NodeResourcesInit = MessageInitShape<typeof NodeResourcesSchema>;

/** The agent a coordinator embeds or main.ts serves. */
export interface Agent {
  readonly config: AgentConfig;
  /** ms since the Unix epoch when this agent instance was created (its boot epoch). */
  readonly bootEpochMs: number;
  /** AgentService handlers; callable in process (see `inProcessContext`) or served by a GrpcServer. */
  readonly service: ServiceImpl<typeof AgentService>;
  /** Prepares the state dir and adopts backends from its records. Call once before serving. */
  start(): Promise<AdoptionReport>;
  /**
   * Stops accepting starts and cancels the ones in flight (their processes are
   * stopped). With `stopBackends`, calls Free on each backend (capped, errors and
   * UNIMPLEMENTED ignored) and then stops it gracefully; without, leaves them
   * running for the next agent to adopt.
   */
  close(options: { stopBackends: boolean }): Promise<void>;
  inventory(signal?: AbortSignal): Promise<InventorySnapshot>;
  nodeResources(signal?: AbortSignal): Promise<NodeResourcesInit>;
  /** Rescans the port range for orphans and foreign processes now (also done every orphanScanIntervalMs); returns the orphans. */
  rescanOrphans(): Promise<Orphan[]>;
  /** Foreign processes of the last scan. */
  foreign(): readonly Foreign[];
  /** Live (not exited) backends by incarnation: pid, address, state. For tests and the CLI. */
  processes(): { incarnation: string; model: string; pid: number; address: string; state: BackendPhase["t"] }[];
}

interface StartEntry {
  readonly log: StartLog;
  readonly model: string;
  readonly backend: string;
  /** Settles when the start flow finished (ready, or failed and cleaned up). */
  done: Promise<void>;
}

/** How long a failed start waits for the process's own exit before classifying the failure. */
const exitSettleMs = 300;

/** An exited backend stays listed (state exited) at most this long if no inventory shows it. */
const exitedRetentionMs = 60_000;

/** Finished starts remembered for idempotency (a repeat attaches instead of spawning). */
const maxRememberedStarts = 4096;

type StopResponseInit = MessageInitShape<typeof StopBackendResponseSchema>;


/** The child's environment: the agent's mark first (so a bounded read of /proc/<pid>/environ finds it) and unforgeable by the catalog. */
function buildEnv(entry: CatalogEntry, source: Readonly<Record<string, string | undefined>>, gpuDevice: string, mark: Readonly<Record<string, string>>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const name of entry.envAllow) {
    if (name.endsWith("*")) {
      const prefix = name.slice(0, -1);
      for (const [k, v] of Object.entries(source)) if (k.startsWith(prefix) && v !== undefined) env[k] = v;
    } else {
      const v = source[name];
      if (v !== undefined) env[name] = v;
    }
  }
  Object.assign(env, entry.env);
  if (gpuDevice !== "") env.CUDA_VISIBLE_DEVICES = gpuDevice;
  for (const name of Object.values(markVars)) Reflect.deleteProperty(env, name);
  return { ...mark, ...env };
}

/**
 * The agent's own budget out of `remainingMs` of a caller's deadline: all but a
 * margin of 10 % (at most 250 ms), so the agent's answer (a `failed` event, the
 * lock message) reaches the caller before its transport gives up with a bare
 * DEADLINE_EXCEEDED.
 */
export function budgetBeforeCallerDeadlineMs(remainingMs: number): number {
  return Math.max(0, remainingMs - Math.min(250, remainingMs * 0.1));
}

class FailStart extends Error {
  constructor(
    readonly code: StartFailureCode,
    message: string,
    /** False when the backend answered (it is alive): no point waiting for an exit. */
    readonly mayBeExit = true,
  ) {
    super(message);
  }
}

/**
 * Creates the agent: the node's process table behind AgentService. See
 * services/agent/README.md for the contract of each RPC.
 */
export function createAgent(config: AgentConfig, deps: AgentDeps = {}): Agent {
  const clock = deps.clock ?? systemClock;
  const logger = (deps.logger ?? nullLogger).child({ component: "agent", nodeId: config.nodeId });
  const envSource = deps.env ?? process.env;
  const procRoot = deps.procRoot ?? "/proc";
  const bootEpochMs = Math.floor(clock.wallNow());
  const records = new RecordStore(config.stateDir);
  const logDir = join(config.stateDir, "logs");
  const mark = agentMarkOf(config.nodeId, config.stateDir);
  /** Ports held by processes the agent does not own, as of the last scan. */
  let heldPorts: ReadonlySet<number> = new Set();
  const ports = new PortAllocator({ host: config.backendHost, min: config.portMin, max: config.portMax, quarantineMs: config.portQuarantineMs, clock, blocked: (p) => heldPorts.has(p) });
  const locks = new ModelLocks();
  const hub = new WatchHub<WatchEventInit>();
  const probe = createMemoryProbe({ nvidiaSmiPath: config.nvidiaSmiPath, procRoot });
  /** The process table: one owner per backend, by incarnation. */
  const table = new Map<string, BackendProcess>();
  /** Exited entries already shown once in an inventory; dropped at the next. */
  const shownExited = new Set<string>();
  /** When each exited entry exited (monotonic ms): entries nobody lists are still dropped after exitedRetentionMs. */
  const exitedAtMs = new Map<string, number>();

  /** Bounds the table without relying on inventories being read (an embedded agent may never be listed). */
  const pruneExited = (): void => {
    const now = clock.now();
    for (const [inc, at] of exitedAtMs) {
      if (now - at < exitedRetentionMs) continue;
      exitedAtMs.delete(inc);
      shownExited.delete(inc);
      if (table.get(inc)?.state().t === "exited") table.delete(inc);
    }
  };
  const starts = new Map<string, StartEntry>();
  const closing = new AbortController();
  // The agent's lifetime signal is shared by every operation in flight (each
  // removes its listener when done); many at once is normal, not a leak.
  setMaxListeners(0, closing.signal);
  let partials: PartialRecord[] = [];
  let orphans: Orphan[] = [];
  let foreign: Foreign[] = [];
  let cancelOrphanTimer: Cancel = () => {};
  let started = false;

  const recordOf = (p: BackendProcess): BackendRecord => ({
    version: 1,
    incarnation: p.id.incarnation,
    model: p.id.model,
    backend: p.id.backend,
    address: p.id.address,
    pid: p.pid,
    pidStartTime: p.id.pidStartTime,
    gpuDevice: p.id.gpuDevice,
    startedAtMs: p.id.startedAtMs,
    phase: p.state().t === "ready" || (p.state().t === "stopping" && p.stopRequested() !== null) ? "ready" : "loading",
    stopRequested: p.stopRequested(),
  });

  const persist = (p: BackendProcess): void => {
    records.write(recordOf(p)).catch((err: unknown) => {
      logger.error("cannot write backend record", { incarnation: p.id.incarnation, err });
    });
  };

  const watchEvent = (p: BackendProcess, event: WatchEventInit["event"]): void => {
    hub.publish({ incarnation: p.id.incarnation, model: p.id.model, address: p.id.address, at: timestampFromMs(clock.wallNow()), event });
  };

  const onTransition = (p: BackendProcess, _from: BackendPhase, to: BackendPhase): void => {
    switch (to.t) {
      case "ready":
        watchEvent(p, { case: "ready", value: { memoryBytes: BigInt(to.memoryBytes) } });
        break;
      case "exited":
        exitedAtMs.set(p.id.incarnation, clock.now());
        // The process is gone: its record, port and log files go with it.
        records.remove(p.id.incarnation).catch((err: unknown) => {
          logger.error("cannot remove backend record", { incarnation: p.id.incarnation, err });
        });
        ports.release(p.id.port);
        void p.logs.remove();
        logger.info("backend exited", { incarnation: p.id.incarnation, model: p.id.model, pid: p.pid, exitCode: to.exit.exitCode, signal: to.exit.signal, intentional: to.intentional, lastStderrLine: to.lastStderrLine });
        watchEvent(p, { case: "exited", value: { exitCode: to.exit.exitCode ?? undefined, signal: to.exit.signal, intentional: to.intentional, lastStderrLine: to.lastStderrLine } });
        break;
      case "spawning":
      case "loading":
      case "stopping":
        break;
    }
  };

  const processDeps = { clock, graceMs: config.graceMs, logger, onTransition };

  const health = new HealthMonitor({
    clock,
    intervalMs: config.healthIntervalMs,
    timeoutMs: Math.min(config.readiness.intervalMs, config.healthIntervalMs),
    list: () => [...table.values()].filter((p) => p.state().t === "ready").map((p) => ({ incarnation: p.id.incarnation, address: p.id.address })),
    onChange: (incarnation, healthy, detail) => {
      const p = table.get(incarnation);
      if (p === undefined || p.state().t !== "ready") return;
      logger.warn("backend health changed", { incarnation, healthy, detail });
      watchEvent(p, { case: "health", value: { healthy, detail } });
    },
  });

  const liveOnAddress = (address: string): BackendProcess | undefined => {
    for (const p of table.values()) if (p.id.address === address && p.state().t !== "exited") return p;
    return undefined;
  };

  const pickDevice = (requested: string): string => {
    if (requested !== "") {
      if (!config.gpus.includes(requested)) throw invalidArgument("gpuDevice", `"${requested.slice(0, 16)}" is not one of this agent's GPUs (${config.gpus.join(", ") || "none configured"})`);
      return requested;
    }
    if (config.gpus.length === 0) return "";
    // least-loaded configured device; ties go to the first listed
    const counts = new Map<string, number>(config.gpus.map((g) => [g, 0]));
    for (const p of table.values()) if (p.state().t !== "exited" && counts.has(p.id.gpuDevice)) counts.set(p.id.gpuDevice, (counts.get(p.id.gpuDevice) ?? 0) + 1);
    let best = config.gpus[0] ?? "";
    for (const g of config.gpus) if ((counts.get(g) ?? 0) < (counts.get(best) ?? 0)) best = g;
    return best;
  };

  const rememberStart = (incarnation: string, entry: StartEntry): void => {
    starts.set(incarnation, entry);
    if (starts.size <= maxRememberedStarts) return;
    for (const [k, e] of starts) {
      if (starts.size <= maxRememberedStarts) break;
      if (e.log.terminal() && !table.has(k)) starts.delete(k);
    }
  };

  interface StartParams {
    incarnation: string;
    model: string;
    backend: string;
    entry: CatalogEntry;
    options: readonly string[];
    modelFile: string;
    contextSize: number;
    gpuDevice: string;
    deadlineMs: number;
  }

  /** The start flow: lock, port, spawn, record, readiness, LoadModel, ready — or failed with everything cleaned up. */
  const runStart = async (log: StartLog, s: StartParams): Promise<void> => {
    const dl = deadlineSignal(clock, s.deadlineMs, `start of ${s.incarnation}`, closing.signal);
    const signal = dl.signal;
    let release: (() => void) | undefined;
    let port: number | undefined;
    let proc: BackendProcess | undefined;
    let client: Client<typeof Backend> | undefined;
    const exitedCtl = new AbortController();
    try {
      release = await locks.acquire(s.model, "shared", signal);
      port = await ports.allocate(signal);
      if (signal.aborted) throw abortReason(signal);
      if (port === undefined) throw new FailStart(StartFailureCode.NO_PORT, `no free port in ${String(config.portMin)}-${String(config.portMax)}`);
      const device = pickDevice(s.gpuDevice);
      const address = `${config.backendHost}:${String(port)}`;
      const logs = new BackendLogs(logDir, s.incarnation, config.logBufferLines);
      const fds = logs.openForChild();
      const res = await spawnBackend({
        command: s.entry.command,
        args: [...s.entry.args, "--addr", address],
        env: buildEnv(s.entry, envSource, device, markEnv(mark, s.incarnation)),
        cwd: s.entry.cwd,
        stdoutFd: fds.stdoutFd,
        stderrFd: fds.stderrFd,
      });
      fds.close();
      if (!res.ok) {
        void logs.remove();
        throw new FailStart(StartFailureCode.SPAWN_FAILED, `spawn ${s.entry.command}: ${res.error.message}`);
      }
      const pidStart = (await readPidStat(res.handle.pid, procRoot))?.startTimeTicks ?? "0";
      const spawnedProc = new BackendProcess(
        { incarnation: s.incarnation, model: s.model, backend: s.backend, address, port, pidStartTime: pidStart, gpuDevice: device, startedAtMs: clock.wallNow() },
        res.handle,
        logs,
        processDeps,
        { phase: "spawning", stopRequested: null },
      );
      proc = spawnedProc;
      port = undefined; // owned by the process from here: released on its exit
      table.set(s.incarnation, spawnedProc);
      // The record is on disk before anyone hears of the process: an agent that
      // crashes right after "spawned" still finds it on restart.
      await records.write(recordOf(spawnedProc)).catch((err: unknown) => {
        throw new FailStart(StartFailureCode.SPAWN_FAILED, `cannot write the backend record: ${WardenError.from(err).rawMessage}`);
      });
      log.append({ t: "spawned", address, pid: spawnedProc.pid, gpuDevice: device });
      watchEvent(spawnedProc, { case: "started", value: { pid: spawnedProc.pid } });
      void spawnedProc.gone.then(() => {
        exitedCtl.abort(new WardenError(Code.Unavailable, "backend process exited"));
      });
      const life = AbortSignal.any([signal, exitedCtl.signal]);
      client = createClient(Backend, address, { channelOptions: { "grpc.initial_reconnect_backoff_ms": 50, "grpc.max_reconnect_backoff_ms": config.readiness.intervalMs, "grpc.use_local_subchannel_pool": 1 } });
      const c = client;
      await waitReady({
        clock,
        readiness: config.readiness,
        signal: life,
        portOpen: (t) => tcpProbe(config.backendHost, spawnedProc.id.port, t),
        health: async (t, sig) => {
          await c.health({}, { timeoutMs: t, signal: sig });
        },
      }).catch((err: unknown) => {
        const e = WardenError.from(err);
        if (!life.aborted && e.code === Code.DeadlineExceeded) throw new FailStart(StartFailureCode.READINESS_TIMEOUT, e.rawMessage);
        throw e;
      });
      if (!spawnedProc.markLoading()) throw abortReason(life.aborted ? life : signal);
      log.append({ t: "loading" });
      const result = await c
        .loadModel({ Model: s.model, ModelFile: s.modelFile, ContextSize: s.contextSize, Options: [...s.options] }, { signal: life })
        .catch((err: unknown) => {
          if (life.aborted) throw abortReason(life);
          throw new FailStart(StartFailureCode.LOAD_FAILED, `LoadModel: ${WardenError.from(err).message}`);
        });
      if (!result.success) throw new FailStart(StartFailureCode.LOAD_FAILED, result.message === "" ? "LoadModel answered success=false" : result.message, false);
      const mem = await probe([spawnedProc.pid], life).catch(() => undefined);
      const memoryBytes = mem?.perPidBytes.get(spawnedProc.pid) ?? 0;
      if (!spawnedProc.markReady(memoryBytes)) throw abortReason(life.aborted ? life : signal);
      // Queued in the same turn as markReady, so an exit's record removal is ordered after it.
      // Awaited before "ready": a restarted agent must not take a ready backend for an unfinished start.
      await records.write(recordOf(spawnedProc)).catch((err: unknown) => {
        logger.error("cannot write backend record", { incarnation: s.incarnation, err });
      });
      log.append({ t: "ready", address, pid: spawnedProc.pid, memoryBytes });
    } catch (err) {
      let failure: StartEvent & { t: "failed" };
      if (proc !== undefined && !exitedCtl.signal.aborted && !isAborted(signal) && !(err instanceof FailStart && !err.mayBeExit)) {
        // A failed RPC often arrives just before the exit it was caused by:
        // give the exit a moment to show, so the failure says EXITED with its code.
        await sleep(clock, exitSettleMs, exitedCtl.signal).catch(() => {});
      }
      if (proc !== undefined && exitedCtl.signal.aborted) {
        const ex = await proc.gone;
        failure = { t: "failed", code: StartFailureCode.EXITED, message: `backend exited before ready (${ex.exit.signal !== "" ? `signal ${ex.exit.signal}` : `code ${String(ex.exit.exitCode)}`})`, exitCode: ex.exit.exitCode ?? undefined, lastStderrLine: ex.lastStderrLine };
      } else if (err instanceof FailStart) {
        failure = { t: "failed", code: err.code, message: err.message, exitCode: undefined, lastStderrLine: "" };
      } else {
        const e = WardenError.from(err);
        const code = closing.signal.aborted || e.code === Code.Canceled
          ? StartFailureCode.CANCELLED
          : e.code === Code.DeadlineExceeded
            ? StartFailureCode.DEADLINE_EXCEEDED
            : proc === undefined
              ? StartFailureCode.SPAWN_FAILED // e.g. the log files could not be opened
              : StartFailureCode.LOAD_FAILED;
        failure = { t: "failed", code, message: e.rawMessage, exitCode: undefined, lastStderrLine: "" };
      }
      if (proc !== undefined) {
        // Every failure leaves nothing behind: kill the group and wait for the reap.
        const ex = await proc.stop(true).then(() => proc?.gone);
        if (failure.lastStderrLine === "" && ex !== undefined) failure.lastStderrLine = ex.lastStderrLine;
      }
      if (port !== undefined) ports.release(port);
      logger.warn("start failed", { incarnation: s.incarnation, model: s.model, code: StartFailureCode[failure.code], message: failure.message });
      log.append(failure);
    } finally {
      release?.();
      client?.close();
      dl.cleanup();
    }
  };

  const startBackend: ServiceImpl<typeof AgentService>["startBackend"] = async function* (req, ctx): AsyncIterable<StartResponseInit> {
    const incarnation = checkIncarnation("incarnation", req.incarnation);
    const model = checkId("model", req.model);
    const backend = checkId("backend", req.backend);
    const entry = Object.hasOwn(config.catalog, backend) ? config.catalog[backend] : undefined;
    if (entry === undefined) throw invalidArgument("backend", `"${backend}" is not in this agent's catalog (known: ${Object.keys(config.catalog).join(", ")})`);
    const options = checkOptions("options", req.options);
    const modelFile = checkText("modelFile", req.modelFile, 4096);
    if (req.contextSize < 0) throw invalidArgument("contextSize", "must be >= 0");
    if (req.gpuDevice !== "" && !config.gpus.includes(req.gpuDevice)) pickDevice(req.gpuDevice);
    let start = starts.get(incarnation);
    if (start !== undefined) {
      if (start.model !== model || start.backend !== backend) throw invalidArgument("incarnation", `already used for model "${start.model}" on backend "${start.backend}"`);
      const last = start.log.last();
      const proc = table.get(incarnation);
      if (last?.t === "ready" && (proc === undefined || proc.state().t === "exited")) {
        const ex = proc?.state();
        yield startResponseOf({ t: "failed", code: StartFailureCode.EXITED, message: `incarnation ${incarnation} was ready and has exited since; incarnations are never started twice`, exitCode: ex?.t === "exited" ? (ex.exit.exitCode ?? undefined) : undefined, lastStderrLine: ex?.t === "exited" ? ex.lastStderrLine : "" });
        return;
      }
    } else {
      if (closing.signal.aborted) throw new WardenError(Code.Unavailable, "agent is shutting down");
      if (!started) throw new WardenError(Code.Unavailable, "agent not started");
      pruneExited();
      const log = new StartLog();
      const deadlineMs = ctx.deadlineAtMs === undefined ? config.loadDeadlineMs : budgetBeforeCallerDeadlineMs(ctx.deadlineAtMs - Date.now());
      const s: StartEntry = { log, model, backend, done: Promise.resolve() };
      rememberStart(incarnation, s);
      // The start is bound to the call's deadline, not to this stream: a caller that
      // reconnects with the same incarnation attaches to it.
      s.done = runStart(log, { incarnation, model, backend, entry, options, modelFile, contextSize: req.contextSize, gpuDevice: req.gpuDevice, deadlineMs });
      start = s;
    }
    for await (const ev of start.log.follow(ctx.signal)) yield startResponseOf(ev);
  };

  const stopBackend: ServiceImpl<typeof AgentService>["stopBackend"] = async (req, ctx): Promise<StopResponseInit> => {
    const incarnation = checkIncarnation("incarnation", req.incarnation);
    const address = checkAddress("address", req.address);
    const reason = checkText("reason", req.reason, 256);
    const stopped = (o: { exitCode: number | null; signal: string; escalated: boolean }): StopResponseInit => ({
      outcome: { case: "stopped", value: { exitCode: o.exitCode ?? undefined, signal: o.signal, escalated: o.escalated } },
    });
    const alreadyGone = (): StopResponseInit => ({ outcome: { case: "alreadyGone", value: { replacedBy: liveOnAddress(address)?.id.incarnation ?? "" } } });

    /** Decides and acts in one synchronous step; returns undefined when the model lock is needed first. */
    const decide = (haveLock: boolean): Promise<StopResponseInit> | StopResponseInit | undefined => {
      const proc = table.get(incarnation);
      if (proc === undefined) {
        const s = starts.get(incarnation);
        // A start still before spawn holds the model lock: wait for it like any stop.
        if (!haveLock && s !== undefined && !s.log.terminal()) return undefined;
        return alreadyGone();
      }
      if (proc.id.address !== address) throw invalidArgument("address", `incarnation ${incarnation} listens on ${proc.id.address}, not ${address}`);
      if (proc.noteStopRequested({ incarnation, reason, atMs: clock.wallNow() })) persist(proc);
      const phase = proc.state();
      if (phase.t === "exited") {
        const holder = liveOnAddress(address);
        if (holder !== undefined) return { outcome: { case: "alreadyGone", value: { replacedBy: holder.id.incarnation } } };
        return stopped({ exitCode: phase.exit.exitCode, signal: phase.exit.signal, escalated: phase.escalated });
      }
      if (phase.t === "stopping") return proc.stop(req.force).then(stopped);
      if (!haveLock) return undefined;
      logger.info("stopping backend", { incarnation, model: proc.id.model, pid: proc.pid, force: req.force, reason });
      return proc.stop(req.force).then(stopped);
    };

    // Record the stop request durably before anything else happens to the process.
    const known = table.get(incarnation);
    if (known !== undefined && known.id.address === address && known.noteStopRequested({ incarnation, reason, atMs: clock.wallNow() })) {
      await records.write(recordOf(known)).catch((err: unknown) => {
        logger.error("cannot write backend record", { incarnation, err });
      });
    }
    const first = decide(false);
    if (first !== undefined) return raceSignal(Promise.resolve(first), ctx.signal);
    const model = table.get(incarnation)?.id.model ?? starts.get(incarnation)?.model ?? "";
    // Give up on the lock a little before the caller's deadline, so the caller
    // receives the lock error (the message the coordinator matches) rather than
    // its own transport's bare DEADLINE_EXCEEDED.
    const lockWaitMs = ctx.deadlineAtMs === undefined ? config.stopDeadlineMs : budgetBeforeCallerDeadlineMs(ctx.deadlineAtMs - Date.now());
    const lockDl = deadlineSignal(clock, lockWaitMs, "stop lock", ctx.signal);
    const release = await locks.acquire(model, "exclusive", lockDl.signal).finally(() => { lockDl.cleanup(); });
    let result: Promise<StopResponseInit>;
    try {
      result = Promise.resolve(decide(true) ?? alreadyGone());
    } catch (err) {
      release();
      throw err;
    }
    // The lock is held until the reap, whether or not the caller waits for it.
    void result.finally(release).catch(() => {});
    return raceSignal(result, ctx.signal);
  };

  const measure = async (pids: number[], signal?: AbortSignal): Promise<MemoryReading> => probe(pids, signal);

  const inventory = async (signal?: AbortSignal): Promise<InventorySnapshot> => {
    pruneExited();
    // Snapshot synchronously; exited entries are shown once, then dropped.
    const procs: BackendProcess[] = [];
    for (const [inc, p] of table) {
      if (p.state().t === "exited") {
        if (shownExited.has(inc)) {
          table.delete(inc);
          shownExited.delete(inc);
          exitedAtMs.delete(inc);
          continue;
        }
        shownExited.add(inc);
      }
      procs.push(p);
    }
    const orphanList = orphans;
    const live = procs.filter((p) => p.state().t !== "exited").map((p) => p.pid);
    const mem = await measure([...live, ...orphanList.map((o) => o.pid)], signal);
    for (const p of procs) if (p.state().t !== "exited") void p.logs.enforceCap();
    return {
      backends: procs.map((p) => inventoryEntryOf(p, p.state().t === "exited" ? 0 : (mem.perPidBytes.get(p.pid) ?? 0))),
      orphans: orphanList.map((o) => orphanOf(o, mem.perPidBytes.get(o.pid) ?? 0)),
      foreign: foreign.map(foreignOf),
      bootEpochMs,
    };
  };

  const nodeResources = async (signal?: AbortSignal): Promise<NodeResourcesInit> => {
    const mem = await measure([], signal);
    return {
      gpus: mem.gpus.map((g) => ({ index: g.index, name: g.name, totalBytes: BigInt(g.totalBytes), usedBytes: BigInt(g.usedBytes) })),
      ramTotalBytes: BigInt(mem.ram.totalBytes),
      ramUsedBytes: BigInt(mem.ram.usedBytes),
      measuredAt: timestampFromMs(clock.wallNow()),
    };
  };

  const rescanOrphans = async (): Promise<Orphan[]> => {
    const knownPids = new Set<number>();
    const knownIncarnations = new Set<string>();
    const ownPorts = new Set<number>();
    for (const p of table.values()) {
      knownPids.add(p.pid);
      knownIncarnations.add(p.id.incarnation);
      if (p.state().t !== "exited") ownPorts.add(p.id.port);
    }
    const scan = await scanPortRange({ host: config.backendHost, portMin: config.portMin, portMax: config.portMax, mark, knownPids, knownIncarnations, ownPorts, partials, procRoot });
    // A pid that became ours during the scan is not an orphan.
    const nowKnown = new Set([...table.values()].map((p) => p.pid));
    orphans = scan.orphans.filter((o) => !nowKnown.has(o.pid));
    const before = new Set(foreign.map((f) => `${String(f.pid)}@${f.address}`));
    foreign = scan.foreign;
    heldPorts = scan.heldPorts;
    for (const f of foreign) if (!before.has(`${String(f.pid)}@${f.address}`)) logger.warn("foreign process in the port range: reported, never signalled", { pid: f.pid, address: f.address, detail: f.detail });
    return orphans;
  };

  /** StopOrphan's last check, right before a signal: the reason to refuse, or undefined when the pid carries this agent's mark. */
  const refuseUnmarked = async (pid: number): Promise<string | undefined> => {
    const v = classifyEnviron(await readEnviron(pid, procRoot), mark);
    return v.t === "foreign" ? v.detail : undefined;
  };

  const scheduleOrphanScan = (): void => {
    cancelOrphanTimer = clock.setTimer(config.orphanScanIntervalMs, () => {
      void rescanOrphans()
        .catch((err: unknown) => {
          logger.warn("orphan scan failed", { err });
        })
        .finally(() => {
          if (!closing.signal.aborted) scheduleOrphanScan();
        });
    });
  };

  const start = async (): Promise<AdoptionReport> => {
    if (started) throw new WardenError(Code.FailedPrecondition, "agent already started");
    await records.init();
    await mkdir(logDir, { recursive: true, mode: 0o700 });
    const report: AdoptionReport = { adopted: [], forgotten: [], stoppedUnfinished: [], orphans: [] };
    const found = await records.list();
    partials = [];
    for (const r of found) {
      if (r.kind === "partial") {
        const st = r.partial.pid === undefined ? undefined : await readPidStat(r.partial.pid, procRoot);
        if (st === undefined || st.state === "Z") await records.removeFile(r.partial.file);
        else partials.push(r.partial);
        continue;
      }
      const rec = r.record;
      const logs = new BackendLogs(logDir, rec.incarnation, config.logBufferLines);
      const portMatch = /:(\d+)$/.exec(rec.address);
      const port = Number(portMatch?.[1] ?? 0);
      if (table.has(rec.incarnation) || !(await isSameProcessAlive(rec.pid, rec.pidStartTime, procRoot))) {
        await records.remove(rec.incarnation);
        await logs.remove();
        report.forgotten.push(rec.incarnation);
        logger.info("forgot dead backend from record", { incarnation: rec.incarnation, pid: rec.pid });
        continue;
      }
      ports.claim(port);
      const handle = adoptProcess(rec.pid, rec.pidStartTime, config.adoptedPollMs, clock, procRoot);
      const proc = new BackendProcess(
        { incarnation: rec.incarnation, model: rec.model, backend: rec.backend, address: rec.address, port, pidStartTime: rec.pidStartTime, gpuDevice: rec.gpuDevice, startedAtMs: rec.startedAtMs },
        handle,
        logs,
        processDeps,
        { phase: "ready", stopRequested: rec.stopRequested },
      );
      table.set(rec.incarnation, proc);
      starts.set(rec.incarnation, { log: readyLog(proc), model: rec.model, backend: rec.backend, done: Promise.resolve() });
      report.adopted.push(rec.incarnation);
      logger.info("adopted backend", { incarnation: rec.incarnation, model: rec.model, pid: rec.pid, address: rec.address, stopRequested: rec.stopRequested !== null });
      if (rec.phase !== "ready") {
        // Its StartBackend stream died with the old agent, so no caller will ever
        // learn it became ready: stop it rather than leave a backend nobody routes to.
        report.stoppedUnfinished.push(rec.incarnation);
        void proc.stop(true);
      }
    }
    started = true;
    report.orphans = await rescanOrphans().catch(() => []);
    scheduleOrphanScan();
    health.start();
    return report;
  };

  const readyLog = (p: BackendProcess): StartLog => {
    const log = new StartLog();
    log.append({ t: "spawned", address: p.id.address, pid: p.pid, gpuDevice: p.id.gpuDevice });
    log.append({ t: "loading" });
    log.append({ t: "ready", address: p.id.address, pid: p.pid, memoryBytes: 0 });
    return log;
  };

  const close = async (options: { stopBackends: boolean }): Promise<void> => {
    if (closing.signal.aborted) return;
    closing.abort(new WardenError(Code.Canceled, "agent shutting down"));
    cancelOrphanTimer();
    health.stop();
    await Promise.allSettled([...starts.values()].map((s) => s.done));
    const live = [...table.values()].filter((p) => p.state().t !== "exited");
    if (options.stopBackends) {
      await Promise.allSettled(
        live.map(async (p) => {
          const c = createClient(Backend, p.id.address);
          try {
            await c.free({}, { timeoutMs: config.freeTimeoutMs });
          } catch (err) {
            const e = WardenError.from(err);
            if (e.code !== Code.Unimplemented) logger.warn("Free before stop failed; stopping anyway", { incarnation: p.id.incarnation, err: e.message });
          } finally {
            c.close();
          }
          p.noteStopRequested({ incarnation: p.id.incarnation, reason: "agent-exit", atMs: clock.wallNow() });
          await p.stop(false);
        }),
      );
    } else {
      for (const p of live) p.handle.detach();
    }
    await records.flush();
  };

  /**
   * StopOrphan: only a pid the agent itself reports as an orphan right now
   * (rescanned here) may be signalled, and only if it still carries this
   * agent's mark right before the signal. A foreign pid is refused
   * (FAILED_PRECONDITION); anything else is alreadyGone.
   */
  const stopOrphan: ServiceImpl<typeof AgentService>["stopOrphan"] = async (req) => {
    if (!Number.isInteger(req.pid) || req.pid <= 1) throw invalidArgument("pid", `must be a process id > 1, got ${String(req.pid)}`);
    const reason = checkText("reason", req.reason, 256);
    const current = await rescanOrphans();
    const o = current.find((x) => x.pid === req.pid && (req.address === "" || x.address === req.address));
    if (o === undefined) {
      const f = foreign.find((x) => x.pid === req.pid);
      if (f !== undefined) throw new WardenError(Code.FailedPrecondition, `pid ${String(f.pid)} on ${f.address} is foreign (${f.detail}): this agent never signals a process it did not start`);
      return { outcome: { case: "alreadyGone", value: { replacedBy: "" } } };
    }
    logger.info("stopping orphan", { pid: o.pid, address: o.address, model: o.model, force: req.force, reason });
    const r = await stopOrphanProcess(o.pid, { force: req.force, graceMs: config.graceMs, clock, procRoot, verify: refuseUnmarked });
    orphans = orphans.filter((x) => x.pid !== o.pid);
    if (r === undefined) return { outcome: { case: "alreadyGone", value: { replacedBy: "" } } };
    return { outcome: { case: "stopped", value: { signal: r.signal, escalated: r.escalated } } };
  };

  const service: ServiceImpl<typeof AgentService> = {
    startBackend,
    stopBackend,
    stopOrphan,
    async listBackends(_req, ctx) {
      const inv = await inventory(ctx.signal);
      return { backends: inv.backends, orphans: inv.orphans, foreign: inv.foreign, bootEpoch: BigInt(bootEpochMs) };
    },
    async getNodeStatus(_req, ctx) {
      return { nodeId: config.nodeId, labels: { ...config.labels }, resources: await nodeResources(ctx.signal), bootEpoch: BigInt(bootEpochMs) };
    },
    async *watchBackends(_req, ctx) {
      yield* hub.subscribe(AbortSignal.any([ctx.signal, closing.signal]));
    },
  };

  return {
    config,
    bootEpochMs,
    service,
    start,
    close,
    inventory,
    nodeResources,
    rescanOrphans,
    foreign: () => foreign,
    processes: () =>
      [...table.values()].filter((p) => p.state().t !== "exited").map((p) => ({ incarnation: p.id.incarnation, model: p.id.model, pid: p.pid, address: p.id.address, state: p.state().t })),
  };
}
