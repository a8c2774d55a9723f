/**
 * Runs a coordinator process until SIGINT/SIGTERM: used by `npm start`,
 * `warden up` and `warden coordinator`. `up` mode (single machine) stops every
 * backend it started on exit; a plain coordinator never stops backends
 * (DESIGN §2). SIGHUP reloads models and policy.
 */
import { readFile } from "node:fs/promises";
import { routeGrpcJsLogs } from "@warden/grpc";
import { Code, WardenError, createLogger, formatDurationMs, invalidArgument, wardenVersion } from "@warden/common";
import { parseCoordinatorConfig, type CoordinatorConfig } from "./config/coordinator-config.js";
import { startCoordinator } from "./coordinator.js";
import { embeddedAgentConfig } from "./nodes/embedded-node.js";
import { demoConfig } from "./config/demo-config.js";
import { ensureStateDir } from "./config/state-dir.js";
import { checkCoordinatorFiles } from "./config/config-files.js";
import { FileStateStore } from "./config/file-state-store.js";
import { readTokenTable } from "./auth/coordinator-auth.js";
import { checkHaRequirements, defaultHaConfig } from "./ha/ha-config.js";
import { serveHaCoordinator } from "./ha/run-ha-coordinator.js";
import { defaultCoordinatorInboxPrefix } from "./config/nats-config.js";

export interface RunCoordinatorOptions {
  /** YAML config path; undefined = the built-in demo config. */
  readonly config?: string | undefined;
  readonly listen?: string | undefined;
  readonly stateDir?: string | undefined;
  /** host:port for Prometheus `/metrics`; overrides the config. */
  readonly metricsListen?: string | undefined;
  /** host:port of the HTTP listener (OpenAI API), or "off"; overrides the config's httpListen. */
  readonly httpListen?: string | undefined;
  /** The HTTP listener when neither the flag nor the config sets one (`warden up`: 127.0.0.1:8080). */
  readonly httpDefault?: string | undefined;
  /** Single-machine mode: stop every backend on exit. */
  readonly up: boolean;
  /** @default "info" */
  readonly logLevel?: string | undefined;
  /** Where logs go (a pretty printer for terminals); stdout JSON by default. */
  readonly logDestination?: NodeJS.WritableStream | undefined;
  /** Where the banner goes. @default process.stdout */
  readonly out?: NodeJS.WritableStream;
  /** Command prefix shown in the banner. @default "warden" */
  readonly cliName?: string;
  /** Validate the config, print the effective settings and resolve 0 without starting. */
  readonly checkConfig?: boolean;
  /** Leave the "Try …" and "Ctrl-C …" lines out of the banner (a wrapper such as `npm run cluster` prints its own). */
  readonly quietBanner?: boolean;
  /** Allow plaintext on a non-loopback address (overrides the config's `insecure`). */
  readonly insecure?: boolean | undefined;
  /** Certificate, key and CA files (override the config's `tls.cert`, `tls.key`, `tls.ca`). */
  readonly tlsCert?: string | undefined;
  readonly tlsKey?: string | undefined;
  readonly tlsCa?: string | undefined;
  /** `--ha`: run as an HA member, with the config's `ha:` or its defaults. */
  readonly ha?: boolean | undefined;
  /** `--nats-url`: comma-separated NATS URLs over the config's nats.url. */
  readonly natsUrl?: string | undefined;
}

/** --ha and --nats-url over the config's ha: and nats.url; the HA requirements checked whole. */
function haFlags(base: CoordinatorConfig, o: RunCoordinatorOptions): Partial<CoordinatorConfig> {
  const nats = o.natsUrl === undefined ? {} : { nats: { ...(base.nats ?? { inboxPrefix: defaultCoordinatorInboxPrefix }), url: o.natsUrl } };
  const ha = base.ha ?? (o.ha === true ? defaultHaConfig : undefined);
  return { ...nats, ...(ha === undefined ? {} : { ha }) };
}

/** Reads the config file; a missing file, a directory or no permission is INVALID_ARGUMENT naming --config and the path. */
async function readConfigFile(path: string): Promise<string> {
  try {
    return await readFile(path, "utf8");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === "ENOENT" ? "no such file" : code === "EISDIR" ? "is a directory, not a YAML file" : code === "EACCES" ? "permission denied" : (err as Error).message;
    throw invalidArgument("--config", `cannot read ${path}: ${why}`);
  }
}

/**
 * In single-machine mode every model's backend must be in the embedded
 * agent's catalog: otherwise the model is accepted, every load fails, and the
 * caller sees "in load-failure cooldown" instead of the cause.
 */
export function checkEmbeddedCatalog(c: CoordinatorConfig): void {
  if (!c.embeddedAgent) return;
  let agent;
  try {
    agent = embeddedAgentConfig(c);
  } catch (err) {
    const e = WardenError.from(err);
    throw new WardenError(e.code, `agent.${e.rawMessage}`);
  }
  const names = Object.keys(agent.catalog);
  c.models.forEach((m, i) => {
    if (!(m.backend in agent.catalog)) throw invalidArgument(`models[${String(i)}].backend`, `"${m.backend}" is not in the embedded agent's catalog (agent.catalog has ${names.join(", ") || "nothing"})`);
  });
}

const onOff = (b: boolean | undefined): string => (b === true ? "on" : "off");

/** The effective eviction policy in one line (printed at start: defaults are easy to misremember). */
export function policyLine(c: CoordinatorConfig): string {
  const p = c.policy;
  return [
    `limitPerNode=${p.limitPerNode === undefined || p.limitPerNode === 0 ? "unlimited" : String(p.limitPerNode)}`,
    `idleCheck=${onOff(p.idleCheck)}${p.idleCheck === true ? ` (${formatDurationMs(p.idleTimeoutMs ?? 0)})` : ""}`,
    `busyCheck=${onOff(p.busyCheck)}${p.busyCheck === true ? ` (${formatDurationMs(p.busyTimeoutMs ?? 0)})` : ""}`,
    `memoryReclaimer=${onOff(p.memoryReclaimer)}${p.memoryReclaimer === true ? ` (${String(p.memoryThreshold)})` : ""}`,
    `forceEvictionWhenBusy=${onOff(p.forceEvictionWhenBusy)}`,
    `sizeAware=${onOff(p.sizeAware)}`,
  ].join(" ");
}

/** A listen failure is the operator's to fix (port taken, no permission): not "Warden unreachable". */
function listenError(err: unknown): unknown {
  if (!(err instanceof WardenError) || !err.rawMessage.startsWith("cannot listen")) return err;
  const inUse = /EADDRINUSE/.test(err.rawMessage);
  const denied = /EACCES/.test(err.rawMessage);
  const addr = /^cannot listen on (\S+?):? /.exec(err.rawMessage)?.[1] ?? "";
  return new WardenError(Code.FailedPrecondition, inUse ? `cannot listen on ${addr}: address already in use (another Warden? choose another with --listen)` : denied ? `cannot listen on ${addr}: permission denied` : err.rawMessage);
}

/** --insecure and --tls-* over the config's `insecure` and `tls`. */
function transportFlags(base: CoordinatorConfig, o: RunCoordinatorOptions): Partial<CoordinatorConfig> {
  const out: { insecure?: boolean; tls?: CoordinatorConfig["tls"] } = {};
  if (o.insecure === true) out.insecure = true;
  if (o.tlsCert !== undefined || o.tlsKey !== undefined || o.tlsCa !== undefined) {
    const certFile = o.tlsCert ?? base.tls?.certFile;
    const keyFile = o.tlsKey ?? base.tls?.keyFile;
    if (certFile === undefined || keyFile === undefined) throw invalidArgument(certFile === undefined ? "--tls-cert" : "--tls-key", "--tls-cert and --tls-key go together (or set tls.cert and tls.key in the config)");
    const caFile = o.tlsCa ?? base.tls?.caFile;
    out.tls = { certFile, keyFile, ...(caFile === undefined ? {} : { caFile }) };
  }
  return out;
}

/** --http over the config's httpListen over the command's default. */
function httpFlag(base: CoordinatorConfig, o: RunCoordinatorOptions): { httpListen?: string | undefined } {
  if (o.httpListen === "off") return { httpListen: undefined };
  if (o.httpListen !== undefined) return { httpListen: o.httpListen };
  return base.httpListen === undefined && o.httpDefault !== undefined ? { httpListen: o.httpDefault } : {};
}

/** Starts the coordinator and resolves with the exit code once it has shut down. */
export async function runCoordinator(o: RunCoordinatorOptions): Promise<number> {
  const out = o.out ?? process.stdout;
  const cli = o.cliName ?? "warden";
  const log = createLogger({ name: "coordinator", level: o.logLevel ?? "info", ...(o.logDestination === undefined ? {} : { destination: o.logDestination }) });
  const grpcLog = log.child({ component: "grpc-js" });
  routeGrpcJsLogs((message) => {
    grpcLog.debug(message);
  });
  const load = async (): Promise<CoordinatorConfig> => {
    const base = o.config === undefined ? demoConfig() : parseCoordinatorConfig(await readConfigFile(o.config));
    const merged = { ...base, ...(o.listen === undefined ? {} : { listen: o.listen }), ...(o.stateDir === undefined ? {} : { stateDir: o.stateDir }), ...(o.metricsListen === undefined ? {} : { metricsListen: o.metricsListen }), ...httpFlag(base, o), ...transportFlags(base, o), ...haFlags(base, o) };
    if (merged.ha !== undefined) checkHaRequirements({ ...merged, ha: merged.ha });
    checkEmbeddedCatalog(merged);
    return merged;
  };
  const config = await load();
  if (o.checkConfig === true) {
    checkCoordinatorFiles(config);
    // A single coordinator starts from the operator's settings in its state dir (drains, policy, limits,
    // scale): one it cannot read would stop the start, so the check reads it too (HA keeps them in NATS).
    if (config.ha === undefined) {
      await FileStateStore.open(config.stateDir).catch((err: unknown) => {
        const e = WardenError.from(err);
        throw invalidArgument("stateDir", e.rawMessage.replace(/^stateDir: /, ""));
      });
    }
    out.write(
      [
        `config ${o.config ?? "(built-in demo)"}: valid`,
        `  listen         ${config.listen}${config.inferenceListen === undefined ? "" : ` (data plane ${config.inferenceListen})`}`,
        `  stateDir       ${config.stateDir}`,
        `  http           ${config.httpListen ?? "off"}`,
        `  embeddedAgent  ${String(config.embeddedAgent)}`,
        `  placement      ${config.placement}`,
        `  policy         ${policyLine(config)}`,
        `  models         ${config.models.map((m) => `${m.id} (${m.backend}${m.replicas.min > 0 || m.replicas.max > 1 ? `, replicas ${String(m.replicas.min)}..${String(m.replicas.max)}` : ""}${m.spread === "any" ? "" : `, spread ${m.spread}`})`).join(", ") || "(none)"}`,
        `  nats           ${config.nats?.url ?? "off"}`,
        `  ha             ${config.ha === undefined ? "off" : `on (advertise ${config.ha.advertise ?? config.listen}, lease ${formatDurationMs(config.ha.leaseMs)}, renew ${formatDurationMs(config.ha.renewMs)}, margin ${formatDurationMs(config.ha.marginMs)}, replicas ${String(config.ha.replicas)})`}`,
        `  tls            ${config.tls === undefined ? `off (plaintext${config.insecure ? ", insecure: true" : ", loopback only"})` : `${config.tls.certFile}${config.tls.caFile === undefined ? "" : ` (mutual TLS, CA ${config.tls.caFile})`}`}`,
        `  auth           ${config.auth.tokensFile === undefined ? "off" : `${config.auth.tokensFile} (${String((await readTokenTable(config.auth.tokensFile)).size)} tokens)`}${config.auth.backendTokenFile === undefined ? "" : `; backend token ${config.auth.backendTokenFile}`}`,
        ``,
      ].join("\n"),
    );
    return 0;
  }
  const stateDir = await ensureStateDir(config.stateDir, o.stateDir === undefined ? "stateDir" : "--state-dir");
  if (config.ha !== undefined) {
    try {
      return await serveHaCoordinator(config, { log, out, load });
    } catch (err) {
      throw listenError(err);
    }
  }
  let c: Awaited<ReturnType<typeof startCoordinator>>;
  try {
    c = await startCoordinator(config, { logger: log });
  } catch (err) {
    throw listenError(err);
  }
  log.info("effective policy", { policy: policyLine(config), version: wardenVersion });
  const models = config.models.map((m) => m.id);
  out.write(
    [
      ``,
      `Warden is running${config.embeddedAgent ? " (coordinator + embedded agent)" : ""}.`,
      `  Admin API      ${c.address}  (warden.v1.AdminService, gRPC)`,
      `  Inference API  ${c.address}  (warden.v1.InferenceService, gRPC)`,
      ...(c.inferenceAddress === undefined ? [] : [`  Data plane     ${c.inferenceAddress}  (warden.v1.InferenceService only, lean HTTP/2 gRPC)`]),
      ...(c.httpAddress === undefined
        ? []
        : [
            `  OpenAI API     ${config.tls === undefined ? "http" : "https"}://${c.httpAddress}/v1  (OpenAI-compatible HTTP; --http off turns it off)`,
            `  Dashboard      ${config.tls === undefined ? "http" : "https"}://${c.httpAddress}/  (live nodes, instances and evictions in a browser)`,
          ]),
      `  Models         ${models.join(", ") || "(none configured)"}`,
      `  Policy         ${policyLine(config)}`,
      `  State dir      ${stateDir}  (journal, agent records; --state-dir or stateDir)`,
      ...(c.metricsAddress === undefined ? [] : [`  Metrics        http://${c.metricsAddress}/metrics`]),
      ``,
      ...(o.quietBanner === true
        ? []
        : [
            `Try, in another terminal:`,
            `  ${cli} models ls --addr ${c.address}`,
            `  ${cli} predict ${models[0] ?? "<model>"} "hello" --addr ${c.address}`,
            `  ${cli} explain ${models[1] ?? models[0] ?? "<model>"} --addr ${c.address}`,
            ...(c.httpAddress === undefined || config.tls !== undefined ? [] : [`  curl http://${c.httpAddress}/v1/chat/completions -H 'content-type: application/json' -d '{"model":"${models[0] ?? "<model>"}","messages":[{"role":"user","content":"hello"}]}'`]),
            ``,
            `Ctrl-C stops ${o.up ? "Warden and every backend it started" : "the coordinator (backends keep running)"}.`,
            ``,
          ]),
    ].join("\n"),
  );
  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: string): void => {
      if (stopping) return;
      stopping = true;
      log.info("shutting down", { signal, stopBackends: o.up });
      c.close({ stopBackends: o.up }).then(
        () => {
          resolve(0);
        },
        (err: unknown) => {
          log.error("shutdown failed", { err: err instanceof Error ? err.message : String(err) });
          resolve(1);
        },
      );
    };
    process.on("SIGINT", () => {
      stop("SIGINT");
    });
    process.on("SIGTERM", () => {
      stop("SIGTERM");
    });
    process.on("SIGHUP", () => {
      // A refused reload (config, tokens or certificate file) is logged and the running config kept:
      // caught after the reload too, or its rejection would be unhandled and end the process.
      load()
        .then((next) => c.reload(next))
        .catch((err: unknown) => {
          log.error("config reload rejected; keeping the running config", { err: err instanceof Error ? err.message : String(err) });
        });
    });
  });
}
