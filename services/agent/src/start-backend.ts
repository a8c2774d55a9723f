import { availableParallelism } from "node:os";
import { checkPeers, type PeerSpec } from "./peer-source.js";
import { Code, WardenError, abortReason, checkArtifacts, checkLoadSettings, type ArtifactSpec, deadlineSignal, invalidArgument, maxContextSize, sleep, type LoadSettings } from "@warden/common";
import { backendClientTls } from "./backend-client-tls.js";
import { createClient, type Client, type ServiceImpl } from "@warden/grpc";
import { Backend, StartFailureCode, type AgentService, type StartBackendRequest } from "@warden/proto";
import type { CatalogEntry } from "./catalog-entry.js";
import { recordOf, type AgentContext } from "./agent-context.js";
import { BackendLogs } from "./backend-logs.js";
import { BackendProcess } from "./backend-process.js";
import { budgetBeforeCallerDeadlineMs } from "./caller-deadline.js";
import { isAborted } from "./is-aborted.js";
import { localaiEnv, localaiEnvAllow } from "./launch-profile.js";
import { loadModelFields } from "./load-model-options.js";
import { resolveModelFile } from "./model-file.js";
import { markEnv, markVars } from "./process-mark.js";
import { readPidStat } from "./proc-fs.js";
import { spawnBackend } from "./process-handle.js";
import { startResponseOf, type StartResponseInit } from "./proto-views.js";
import { waitReady, tcpProbe } from "./readiness.js";
import { checkId, checkIncarnation, checkOptions, checkText } from "./request-validation.js";
import { StartLog, type StartEvent } from "./start-log.js";
import { unsafeBundleReason } from "./tar-extract.js";
import type { StartEntry } from "./start-registry.js";

/** How long a failed start waits for the process's own exit before classifying the failure. */
const exitSettleMs = 300;
/** How long a failed start waits for the exit event of a process the kernel already shows dead (its reap can trail under load). */
const exitReapWaitMs = 10_000;

/** The child's environment: the agent's mark first (so a bounded read of /proc/<pid>/environ finds it) and unforgeable by the catalog. */
function buildEnv(entry: CatalogEntry, source: Readonly<Record<string, string | undefined>>, gpuDevice: string, mark: Readonly<Record<string, string>>, modelsPath: string): Record<string, string> {
  const env: Record<string, string> = {};
  const allow = entry.profile === "localai" ? [...localaiEnvAllow, ...entry.envAllow] : entry.envAllow;
  for (const name of allow) {
    if (name.endsWith("*")) {
      const prefix = name.slice(0, -1);
      for (const [k, v] of Object.entries(source)) if (k.startsWith(prefix) && v !== undefined) env[k] = v;
    } else {
      const v = source[name];
      if (v !== undefined) env[name] = v;
    }
  }
  if (entry.profile === "localai") Object.assign(env, localaiEnv(source, modelsPath));
  Object.assign(env, entry.env);
  if (gpuDevice !== "") env.CUDA_VISIBLE_DEVICES = gpuDevice;
  for (const name of Object.values(markVars)) Reflect.deleteProperty(env, name);
  return { ...mark, ...env };
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

/** The requested GPU (validated against the config), or the least-loaded configured one. */
function pickDevice(ctx: AgentContext, requested: string): string {
  const { config, table } = ctx;
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
}

interface StartParams {
  incarnation: string;
  model: string;
  backend: string;
  entry: CatalogEntry;
  options: readonly string[];
  /** Absolute and confined (model-file.ts), or "". */
  modelFile: string;
  /** Pulled by digest before the spawn (artifact-cache.ts). */
  artifacts: readonly ArtifactSpec[];
  /** Other agents to fetch each digest from first (ModelArtifact.peers, peer-source.ts), by sha256. */
  peers: ReadonlyMap<string, readonly PeerSpec[]>;
  /** The artifact whose cached file is the model file (modelFile names its path); undefined = modelFile as given. */
  modelFileArtifact: ArtifactSpec | undefined;
  contextSize: number;
  load: LoadSettings;
  gpuDevice: string;
  deadlineMs: number;
  /** The epoch the start was admitted under: checked again right before the spawn. */
  leaderEpoch: bigint;
  /** The coordinator's digest of the load settings (kept in the record, reported in the inventory). */
  loadDigest: string;
}

/** Artifact failures as the start's typed codes (the message already names the artifact: artifact-cache.ts). */
const artifactFailure: Partial<Record<Code, StartFailureCode>> = {
  [Code.DataLoss]: StartFailureCode.ARTIFACT_DIGEST_MISMATCH,
  [Code.NotFound]: StartFailureCode.ARTIFACT_NOT_FOUND,
  [Code.Unavailable]: StartFailureCode.ARTIFACT_SOURCE_UNAVAILABLE,
  [Code.FailedPrecondition]: StartFailureCode.ARTIFACT_SOURCE_UNAVAILABLE,
  [Code.ResourceExhausted]: StartFailureCode.ARTIFACT_NO_SPACE,
  [Code.Internal]: StartFailureCode.ARTIFACT_SOURCE_UNAVAILABLE,
  [Code.Unknown]: StartFailureCode.ARTIFACT_SOURCE_UNAVAILABLE,
};

/**
 * Pulls the start's artifacts (all at once) before anything is locked or
 * spawned; each one's progress goes on the start's stream as `pulling`.
 * Returns the cached path by digest. A failure is the start's failure, with
 * the artifact's code; a deadline or cancel stays what it is.
 */
async function pullArtifacts(ctx: AgentContext, log: StartLog, s: StartParams, signal: AbortSignal): Promise<Map<string, string>> {
  const paths = new Map<string, string>();
  const cache = ctx.artifacts;
  if (s.artifacts.length === 0 || cache === undefined) return paths;
  await Promise.all(
    s.artifacts.map(async (a) => {
      const path = await cache.ensure(a, signal, (p) => {
        log.append({ t: "pulling", ...p });
      }, s.peers.get(a.sha256), { model: s.model }).catch((err: unknown) => {
        const e = WardenError.from(err);
        if (signal.aborted || e.code === Code.Canceled || e.code === Code.DeadlineExceeded) throw err;
        throw new FailStart(artifactFailure[e.code] ?? StartFailureCode.ARTIFACT_SOURCE_UNAVAILABLE, e.rawMessage);
      });
      paths.set(a.sha256, path);
    }),
  );
  return paths;
}

/** Installs the start's backend bundle when its catalog entry names one (backend-bundle.ts); failures as an artifact's. */
async function installBundle(ctx: AgentContext, log: StartLog, s: StartParams, signal: AbortSignal): Promise<void> {
  const bundle = s.entry.bundle;
  if (bundle === undefined) return;
  if (ctx.bundles === undefined) throw new FailStart(StartFailureCode.SPAWN_FAILED, "a bundle backend needs the agent's modelsPath");
  await ctx.bundles
    .ensure(bundle, signal, (p) => {
      log.append("stage" in p ? { t: "stage", stage: p.stage } : { t: "pulling", ...p });
    }, { t: "start", backend: s.backend, model: s.model, incarnation: s.incarnation })
    .catch((err: unknown) => {
      const e = WardenError.from(err);
      if (signal.aborted || e.code === Code.Canceled || e.code === Code.DeadlineExceeded) throw err;
      throw new FailStart(e.details.reason === unsafeBundleReason ? StartFailureCode.SPAWN_FAILED : (artifactFailure[e.code] ?? StartFailureCode.ARTIFACT_SOURCE_UNAVAILABLE), e.rawMessage);
    });
}

/** True when /proc shows `pid` exited (a zombie not reaped yet, or no such process). */
async function deadInKernel(pid: number, procRoot: string): Promise<boolean> {
  const st = await readPidStat(pid, procRoot).catch(() => undefined);
  return st === undefined || st.state === "Z";
}

/** The start flow: lock, port, spawn, record, readiness, LoadModel, ready — or failed with everything cleaned up. */
async function runStart(ctx: AgentContext, log: StartLog, s: StartParams): Promise<void> {
  const { config, clock, logger, procRoot, records, ports, locks, table, probe } = ctx;
  const dl = deadlineSignal(clock, s.deadlineMs, `start of ${s.incarnation}`, ctx.closing);
  const signal = dl.signal;
  let release: (() => void) | undefined;
  let port: number | undefined;
  let proc: BackendProcess | undefined;
  let client: Client<typeof Backend> | undefined;
  const exitedCtl = new AbortController();
  // Held until the process is in the table (or the start failed): RemoveBundle refuses meanwhile.
  const releaseBundle = s.entry.bundle === undefined ? undefined : ctx.bundles?.use(s.entry.bundle.sha256);
  // The start's artifacts stay in the cache from before the pull until the backend (which then holds them itself) or the start ends.
  if (s.artifacts.length > 0) ctx.artifacts?.index.hold(s.incarnation, s.artifacts.map((a) => a.sha256));
  try {
    const [pulled] = await Promise.all([pullArtifacts(ctx, log, s, signal), installBundle(ctx, log, s, signal)]);
    const modelFile = s.modelFileArtifact === undefined ? s.modelFile : (pulled.get(s.modelFileArtifact.sha256) ?? s.modelFile);
    release = await locks.acquire(s.model, "shared", signal);
    port = await ports.allocate(signal);
    if (signal.aborted) throw abortReason(signal);
    if (port === undefined) throw new FailStart(StartFailureCode.NO_PORT, `no free port in ${String(config.portMin)}-${String(config.portMax)}`);
    // A newer leader may have taken over while this start waited for its model lock and port: the
    // inventory it took of this node did not list the start (nothing was spawned yet), so spawning
    // now could run this model beside one that leader placed. The fence is checked again in the turn
    // the spawn begins; a start a newer epoch overtook is cancelled before a process exists.
    try {
      ctx.fence.check(s.leaderEpoch);
    } catch (err) {
      throw new WardenError(Code.Canceled, `${WardenError.from(err).rawMessage}: a newer leader took over while this start waited; nothing was spawned`);
    }
    const device = pickDevice(ctx, s.gpuDevice);
    const address = `${config.backendHost}:${String(port)}`;
    // From here until the table holds the process, inventories list the start (pending-spawns.ts):
    // a leader that takes this node's inventory meanwhile counts it for the node's groups.
    ctx.pendingSpawns.add({ incarnation: s.incarnation, model: s.model, backend: s.backend, address, gpuDevice: device, startedAtMs: clock.wallNow(), loadDigest: s.loadDigest });
    const logs = new BackendLogs(ctx.logDir, s.incarnation, config.logBufferLines);
    const fds = logs.openForChild();
    const res = await spawnBackend({
      command: s.entry.command,
      args: [...s.entry.args, "--addr", address],
      // The token last: a catalog entry's env cannot replace the one the agent checks readiness with.
      env: { ...buildEnv(s.entry, ctx.envSource, device, markEnv(ctx.mark, s.incarnation, s.model), config.modelsPath ?? ""), ...ctx.backendAuth?.env },
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
      { incarnation: s.incarnation, model: s.model, backend: s.backend, address, port, pidStartTime: pidStart, gpuDevice: device, startedAtMs: clock.wallNow(), loadDigest: s.loadDigest, artifactDigests: s.artifacts.map((a) => a.sha256), ...(s.entry.bundle === undefined ? {} : { bundleDigest: s.entry.bundle.sha256 }) },
      res.handle,
      logs,
      ctx.processDeps,
      { phase: "spawning", stopRequested: null },
    );
    proc = spawnedProc;
    port = undefined; // owned by the process from here: released on its exit
    table.set(s.incarnation, spawnedProc);
    ctx.pendingSpawns.remove(s.incarnation);
    // Every report stamped after this one lists the process (report-sequence.ts).
    const heartbeatSequence = ctx.reports.current();
    // The record is on disk before anyone hears of the process: an agent that
    // crashes right after "spawned" still finds it on restart.
    await records.write(recordOf(spawnedProc)).catch((err: unknown) => {
      throw new FailStart(StartFailureCode.SPAWN_FAILED, `cannot write the backend record: ${WardenError.from(err).rawMessage}`);
    });
    log.append({ t: "spawned", address, pid: spawnedProc.pid, gpuDevice: device, bootEpochMs: ctx.bootEpochMs, heartbeatSequence });
    ctx.watchEvent(spawnedProc, { case: "started", value: { pid: spawnedProc.pid } });
    void spawnedProc.gone.then(() => {
      exitedCtl.abort(new WardenError(Code.Unavailable, "backend process exited"));
    });
    const life = AbortSignal.any([signal, exitedCtl.signal]);
    client = createClient(Backend, address, { ...backendClientTls(s.entry), ...(ctx.backendAuth === undefined ? {} : { headers: ctx.backendAuth.headers }), channelOptions: { "grpc.initial_reconnect_backoff_ms": 50, "grpc.max_reconnect_backoff_ms": config.readiness.intervalMs, "grpc.use_local_subchannel_pool": 1 } });
    const c = client;
    await waitReady({
      clock,
      readiness: config.readiness,
      signal: life,
      portOpen: (t) => tcpProbe(config.backendHost, spawnedProc.id.port, t),
      health: async (t, sig) => {
        const reply = await c.health({}, { timeoutMs: t, signal: sig });
        // LocalAI's client takes only "OK" for ready (pkg/grpc/client.go HealthCheck); the poll goes on otherwise.
        if (s.entry.profile === "localai" && new TextDecoder().decode(reply.message) !== "OK") {
          throw new WardenError(Code.Unavailable, `Health answered ${JSON.stringify(new TextDecoder().decode(reply.message).slice(0, 64))}, not "OK"`);
        }
      },
    }).catch((err: unknown) => {
      const e = WardenError.from(err);
      if (!life.aborted && e.code === Code.DeadlineExceeded) throw new FailStart(StartFailureCode.READINESS_TIMEOUT, e.rawMessage);
      throw e;
    });
    if (!spawnedProc.markLoading()) throw abortReason(life.aborted ? life : signal);
    log.append({ t: "loading" });
    const result = await c
      .loadModel(loadModelFields({ model: s.model, modelFile, contextSize: s.contextSize, options: s.options, load: s.load, modelsPath: config.modelsPath ?? "", cpuCount: availableParallelism() }), { signal: life })
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
    ctx.pendingSpawns.remove(s.incarnation);
    let failure: StartEvent & { t: "failed" };
    if (proc !== undefined && !exitedCtl.signal.aborted && !isAborted(signal) && !(err instanceof FailStart && !err.mayBeExit)) {
      // A failed RPC often arrives just before the exit it was caused by:
      // give the exit a moment to show, so the failure says EXITED with its code.
      await sleep(clock, exitSettleMs, exitedCtl.signal).catch(() => {});
      // On a loaded machine the exit event can trail its cause by more than that: a process the
      // kernel already shows dead (a zombie, or gone) has exited, so its exit is waited for.
      if (!isAborted(exitedCtl.signal) && (await deadInKernel(proc.pid, procRoot))) await sleep(clock, exitReapWaitMs, exitedCtl.signal).catch(() => {});
    }
    if (proc !== undefined && exitedCtl.signal.aborted) {
      const ex = await proc.gone;
      failure = { t: "failed", code: StartFailureCode.EXITED, message: `backend exited before ready (${ex.exit.signal !== "" ? `signal ${ex.exit.signal}` : `code ${String(ex.exit.exitCode)}`})`, exitCode: ex.exit.exitCode ?? undefined, lastStderrLine: ex.lastStderrLine };
    } else if (err instanceof FailStart) {
      failure = { t: "failed", code: err.code, message: err.message, exitCode: undefined, lastStderrLine: "" };
    } else {
      const e = WardenError.from(err);
      const code = ctx.closing.aborted || e.code === Code.Canceled
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
    ctx.artifacts?.index.release(s.incarnation);
    release?.();
    releaseBundle?.();
    client?.close();
    dl.cleanup();
  }
}

/** The request's typed LoadModel fields; only the set ones (unset = LocalAI's default, load-model-options.ts). */
function loadSettingsOf(req: StartBackendRequest): LoadSettings {
  return {
    ...(req.backendModel === undefined ? {} : { backendModel: req.backendModel }),
    ...(req.gpuLayers === undefined ? {} : { gpuLayers: req.gpuLayers }),
    ...(req.threads === undefined ? {} : { threads: req.threads }),
    ...(req.batch === undefined ? {} : { batch: req.batch }),
    ...(req.mmap === undefined ? {} : { mmap: req.mmap }),
    ...(req.flashAttention === undefined ? {} : { flashAttention: req.flashAttention }),
    ...(req.cuda === undefined ? {} : { cuda: req.cuda }),
  };
}

/**
 * StartBackend: validates the whole request, then starts the incarnation (or
 * attaches to its start, idempotently) and streams the start's events.
 */
export function createStartBackend(ctx: AgentContext): ServiceImpl<typeof AgentService>["startBackend"] {
  const { config, table, starts } = ctx;
  return async function* (req, callCtx): AsyncIterable<StartResponseInit> {
    ctx.fence.check(req.leaderEpoch);
    const incarnation = checkIncarnation("incarnation", req.incarnation);
    const model = checkId("model", req.model);
    const backend = checkId("backend", req.backend);
    const entry = Object.hasOwn(config.catalog, backend) ? config.catalog[backend] : undefined;
    if (entry === undefined) throw invalidArgument("backend", `"${backend}" is not in this agent's catalog (known: ${Object.keys(config.catalog).join(", ")})`);
    const options = checkOptions("options", req.options);
    if (req.contextSize < 0 || req.contextSize > maxContextSize) throw invalidArgument("contextSize", `must be in 0..${String(maxContextSize)}`);
    const load = checkLoadSettings(loadSettingsOf(req));
    const loadDigest = checkText("load_digest", req.loadDigest, 64);
    if (req.gpuDevice !== "" && !config.gpus.includes(req.gpuDevice)) pickDevice(ctx, req.gpuDevice);
    const artifacts = checkArtifacts("artifacts", req.artifacts.map((a) => ({ source: a.source, sha256: a.sha256, sizeBytes: a.sizeBytes, path: a.path })));
    const peers = new Map(req.artifacts.map((a, i) => [a.sha256, checkPeers(`artifacts[${String(i)}].peers`, a.peers)] as const));
    if (artifacts.length > 0 && config.modelsPath === undefined) throw invalidArgument("artifacts", "this agent has no modelsPath, so it keeps no artifact cache; set modelsPath in the agent config");
    // A modelFile naming an artifact's path is that artifact's cached file (it need not exist yet).
    const modelFileArtifact = artifacts.find((a) => a.path === req.modelFile);
    // Last of the checks: the only one that reads the disk (realpath).
    const modelFile = modelFileArtifact === undefined ? await resolveModelFile("modelFile", req.modelFile, config.modelsPath) : "";
    // The whole request is valid: the epoch goes on disk before anything is acted on.
    await ctx.fence.admit(req.leaderEpoch);
    ctx.fence.check(req.leaderEpoch);
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
      if (ctx.closing.aborted) throw new WardenError(Code.Unavailable, "agent is shutting down");
      if (!ctx.isStarted()) throw new WardenError(Code.Unavailable, "agent not started");
      table.pruneExited();
      const log = new StartLog();
      const deadlineMs = callCtx.deadlineAtMs === undefined ? config.loadDeadlineMs : budgetBeforeCallerDeadlineMs(callCtx.deadlineAtMs - Date.now());
      const s: StartEntry = { log, model, backend, done: Promise.resolve() };
      starts.remember(incarnation, s);
      ctx.logger.debug("start admitted", { incarnation, model, leaderEpoch: String(req.leaderEpoch) });
      // The start is bound to the call's deadline, not to this stream: a caller that
      // reconnects with the same incarnation attaches to it.
      s.done = runStart(ctx, log, { incarnation, model, backend, entry, options, modelFile, artifacts, peers, modelFileArtifact, contextSize: req.contextSize, load, gpuDevice: req.gpuDevice, deadlineMs, leaderEpoch: req.leaderEpoch, loadDigest });
      start = s;
    }
    for await (const ev of start.log.follow(callCtx.signal)) yield startResponseOf(ev);
  };
}
