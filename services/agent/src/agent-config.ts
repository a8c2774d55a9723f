import { isAbsolute, normalize } from "node:path";
import { LineCounter, parseDocument } from "yaml";
import {
  WardenError,
  checkIdentifier,
  invalidArgument,
  maxDurationMs,
  maxGpusPerNode,
  maxIntervalMs,
  maxLogBufferLines,
  maxOperationTimeoutMs,
  maxReadinessAttempts,
  parseDurationMs,
  parseMemoryBudget,
} from "@warden/common";
import { parseTlsFiles, type TlsFiles } from "@warden/grpc";
import { withConfigLine } from "./config-line.js";
import { bundleRunPath, checkBundle, type BundleSpec } from "./backend-bundle-config.js";
import { checkLocalaiEntry, launchProfiles, localaiCwd, type LaunchProfile } from "./launch-profile.js";
import { parseAgentLimits, type AgentLimits } from "./agent-limits-config.js";
import { parsePlacementLimits, type AgentPlacementLimits } from "./agent-placement-limits.js";

/**
 * One catalog backend: the only place an executable and its base arguments come
 * from. Requests name a catalog entry; they never carry a command line.
 */
export interface CatalogEntry {
  /** Absolute path of the executable (no shell, no PATH lookup). */
  command: string;
  /** Base arguments; the agent appends `--addr host:port`. */
  args: readonly string[];
  /** Fixed environment values given to every process of this backend. */
  env: Readonly<Record<string, string>>;
  /**
   * Names of the agent's own environment variables passed through (an
   * allow-list; `PREFIX_*` matches a prefix). Everything else is withheld, so
   * e.g. LD_PRELOAD never leaks into a backend.
   */
  envAllow: readonly string[];
  /** Working directory; undefined = the agent's. Profile localai: the executable's directory unless set. */
  cwd: string | undefined;
  /**
   * The backend serves TLS: the agent's own calls to it (readiness, Health,
   * Free) verify its certificate against `ca`. The coordinator's side is its
   * `backendTls`. undefined = plaintext.
   */
  tls?: { readonly caFile: string; readonly serverName: string | undefined } | undefined;
  /** How processes are launched (launch-profile.ts). @default "plain" */
  profile: LaunchProfile;
  /** Installed from a bundle before its first start (backend-bundle.ts); `command` is then the bundle's run.sh. */
  bundle?: BundleSpec | undefined;
}

/** Readiness polling of a new backend's Health (DESIGN §5: 20 × 2 s). */
export interface ReadinessConfig {
  /** Health attempts at full interval that make up the budget. @default 20 */
  attempts: number;
  /** Longest wait between polls and the timeout of one Health call. @default 2000 */
  intervalMs: number;
  /**
   * Wait between polls during the first intervalMs; after that the wait doubles
   * up to intervalMs. A backend usually comes up in well under a second; polling
   * at the full 2 s interval would add up to 2 s to every start. The budget stays
   * attempts × intervalMs. @default 50
   */
  initialIntervalMs: number;
}

/** The agent's validated configuration. Durations are milliseconds. */
export interface AgentConfig {
  /** This node's id; matches `[A-Za-z0-9._:-]{1,128}`. */
  nodeId: string;
  /** host:port the AgentService listens on (main.ts; `--listen` overrides). @default "127.0.0.1:7443" */
  listen: string;
  /** host:port the coordinator should dial; @default listen */
  advertiseAddress: string;
  labels: Readonly<Record<string, string>>;
  /** Host the backends bind. @default "127.0.0.1" */
  backendHost: string;
  /** Inclusive port range for backends. */
  portMin: number;
  portMax: number;
  /** A freed port is not reused for this long, so a late call cannot reach a new backend on it. @default 30000 */
  portQuarantineMs: number;
  /**
   * Where the search for a free backend port starts: `first` (ports.min) or
   * `random` (anywhere in the range, so two agents on one machine do not both
   * pick the same first port at the same moment). @default "first"
   */
  portStart: "first" | "random";
  /** Directory of per-backend records (created if missing). */
  stateDir: string;
  catalog: Readonly<Record<string, CatalogEntry>>;
  /**
   * Absolute models root: every modelFile is resolved and confined under it
   * (model-file.ts), it is sent as ModelPath, and profile localai points the HF
   * cache variables at it. Required when a catalog entry has profile localai;
   * unset = this agent serves no model files.
   */
  modelsPath: string | undefined;
  readiness: ReadinessConfig;
  /** SIGTERM → SIGKILL grace. @default 10000 */
  graceMs: number;
  /** A start without a caller deadline is bounded by this. @default 600000 */
  loadDeadlineMs: number;
  /** A stop without a caller deadline waits this long for the model lock. @default 30000 */
  stopDeadlineMs: number;
  /** One artifact pull's whole budget, however many starts wait on it (docs/artifacts.md). @default 3600000 */
  artifactPullTimeoutMs: number;
  /** An artifact pull that receives no byte for this long fails (its partial stays for a resume). @default 30000 */
  artifactStallTimeoutMs: number;
  /**
   * Bytes the artifact cache under modelsPath may hold (`artifactCacheBudget`,
   * a size like "200GiB", 1 KiB..2^53-1 bytes): past it, files no running
   * backend uses are evicted least recently used first. undefined = only the
   * file system's free space bounds the cache.
   */
  artifactCacheBudgetBytes: number | undefined;
  /** Cap of the agent's own Free calls (`--stop-backends-on-exit`). @default 5000 */
  freeTimeoutMs: number;
  /** nvidia-smi executable; "" disables GPU queries. @default "nvidia-smi" */
  nvidiaSmiPath: string;
  /** GPU devices handed out through CUDA_VISIBLE_DEVICES; empty = none assigned. @default [] */
  gpus: readonly string[];
  /** NodeService heartbeat period. @default 1000 */
  heartbeatIntervalMs: number;
  /** Lines of stdout/stderr kept per backend. @default 200 */
  logBufferLines: number;
  /** How often an adopted process (not our child) is checked for exit. @default 1000 */
  adoptedPollMs: number;
  /** How often the port range is scanned for orphans. @default 10000 */
  orphanScanIntervalMs: number;
  /** Health of ready backends is polled this often (WatchBackends health events); 0 disables. @default 5000 */
  healthIntervalMs: number;
  /**
   * AgentService serves TLS with this certificate and dials the coordinator
   * with it; `ca` (mutual TLS) is the CA the coordinator's certificate and
   * the coordinator's client certificate are verified against. undefined = plaintext.
   */
  tls: TlsFiles | undefined;
  /** Allow plaintext on a non-loopback listen address. @default false */
  insecure: boolean;
  /**
   * File holding the backends' shared bearer token: each backend gets it as
   * LOCALAI_GRPC_AUTH_TOKEN (LocalAI's backends then refuse calls without it)
   * and the agent sends it on its own calls. "" = none. @default ""
   */
  backendTokenFile: string;
  /** File holding this node's token for the coordinator (its tokens file lists it as `node node=<nodeId>`). "" = none. @default "" */
  coordinatorTokenFile: string;
  /** Private OCI registries' credentials, Docker's config.json format (registry-auth.ts); read at start and on SIGHUP. "" = anonymous pulls. @default "" */
  registryAuthFile: string;
  /** Message, metadata and stream caps of the AgentService server and the NodeService client (agent-limits-config.ts). */
  limits: AgentLimits;
  /** `maxReplicasPerModel` and `memoryBudget`, sent in Register (agent-placement-limits.ts). @default {} */
  placementLimits: AgentPlacementLimits;
}

/** The YAML / object shape accepted by {@link resolveAgentConfig}. Durations: "10s", "500ms" or a number of ms. */
export type AgentConfigInput = Readonly<Record<string, unknown>>;

/** Catalog entries (backend names sent in Register; the coordinator's bound, node-report-limits maxCatalogBackends). */
export const maxCatalogEntries = 256;
const envNamePattern = /^[A-Za-z_][A-Za-z0-9_]*\*?$/;
const topFields = new Set([
  "nodeId", "listen", "advertiseAddress", "labels", "backendHost", "ports", "stateDir", "catalog", "modelsPath", "readiness",
  "grace", "loadDeadline", "stopDeadline", "freeTimeout", "artifactPullTimeout", "artifactStallTimeout", "artifactCacheBudget", "nvidiaSmi", "gpus", "heartbeatInterval",
  "logBufferLines", "adoptedPoll", "orphanScanInterval", "healthInterval", "tls", "insecure", "backendTokenFile", "coordinatorTokenFile", "registryAuthFile", "limits",
  "maxReplicasPerModel", "memoryBudget",
]);

/** `artifactCacheBudget`: a size (no percentage), at least 1 KiB. */
function cacheBudget(v: unknown): number | undefined {
  const b = parseMemoryBudget(v, "artifactCacheBudget");
  if (b === undefined) return undefined;
  if (b.t !== "bytes" || b.bytes < 1024) throw invalidArgument("artifactCacheBudget", `must be a size like "200GiB", at least 1KiB, got ${JSON.stringify(v).slice(0, 64)}`);
  return b.bytes;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function rejectUnknown(obj: Record<string, unknown>, allowed: ReadonlySet<string>, path: string): void {
  for (const k of Object.keys(obj)) {
    if (!allowed.has(k)) throw invalidArgument(path === "" ? k : `${path}.${k}`, `unknown field (allowed: ${[...allowed].join(", ")})`);
  }
}

function str(v: unknown, field: string, dflt?: string): string {
  if (v === undefined && dflt !== undefined) return dflt;
  if (typeof v !== "string") throw invalidArgument(field, v === undefined ? "required" : "must be a string");
  return v;
}

function id(v: unknown, field: string, dflt?: string): string {
  return checkIdentifier(field, str(v, field, dflt));
}

/** A duration field; `maxMs` is its documented maximum (@warden/common limits.ts). */
function duration(v: unknown, field: string, dfltMs: number, maxMs: number): number {
  if (v === undefined) return dfltMs;
  if (typeof v !== "string" && typeof v !== "number") throw invalidArgument(field, 'must be a duration like "10s"');
  return parseDurationMs(v, field, maxMs);
}

function int(v: unknown, field: string, dflt: number | undefined, min: number, max: number): number {
  if (v === undefined && dflt !== undefined) return dflt;
  if (typeof v !== "number" || !Number.isInteger(v)) throw invalidArgument(field, v === undefined ? "required" : "must be an integer");
  if (v < min || v > max) throw invalidArgument(field, `must be in ${String(min)}..${String(max)}, got ${String(v)}`);
  return v;
}

function hostPort(v: unknown, field: string, dflt?: string): string {
  const s = str(v, field, dflt);
  if (!/^[A-Za-z0-9.\-[\]:]+:\d{1,5}$/.test(s)) throw invalidArgument(field, `must be host:port, got "${s}"`);
  return s;
}

function stringMap(v: unknown, field: string): Record<string, string> {
  if (v === undefined) return {};
  if (!isRecord(v)) throw invalidArgument(field, "must be a map of strings");
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(v)) {
    if (typeof val !== "string") throw invalidArgument(`${field}.${k}`, "must be a string");
    out[k] = val;
  }
  return out;
}

function stringList(v: unknown, field: string): string[] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) throw invalidArgument(field, "must be a list of strings");
  return v.map((x: unknown, i) => str(x, `${field}[${String(i)}]`));
}

const catalogFields = new Set(["command", "args", "env", "envAllow", "cwd", "builtin", "tls", "profile", "bundle"]);

/** Built-in catalog entries selectable with `builtin: <name>`; filled by the caller to avoid an import cycle. */
export type BuiltinCatalog = Readonly<Record<string, () => CatalogEntry>>;

function catalogEntry(v: unknown, field: string, builtins: BuiltinCatalog): CatalogEntry {
  if (!isRecord(v)) throw invalidArgument(field, "must be a map with command, args, env, envAllow, cwd or builtin");
  rejectUnknown(v, catalogFields, field);
  let base: CatalogEntry | undefined;
  if (v.builtin !== undefined) {
    const name = str(v.builtin, `${field}.builtin`);
    const make = builtins[name];
    if (make === undefined) throw invalidArgument(`${field}.builtin`, `unknown builtin "${name}" (known: ${Object.keys(builtins).join(", ")})`);
    base = make();
  }
  const bundle = v.bundle === undefined ? undefined : checkBundle(`${field}.bundle`, v.bundle);
  if (bundle !== undefined && (v.command !== undefined || base !== undefined)) throw invalidArgument(`${field}.bundle`, "a bundle brings its own run.sh: no command or builtin beside it");
  // A bundle's run.sh lives under modelsPath, known once the whole config is read (resolveAgentConfig fills it in).
  const command = bundle !== undefined ? "/" : v.command === undefined && base !== undefined ? base.command : str(v.command, `${field}.command`);
  if (!isAbsolute(command)) throw invalidArgument(`${field}.command`, `must be an absolute path (no PATH lookup), got "${command}"`);
  const env = { ...base?.env, ...stringMap(v.env, `${field}.env`) };
  for (const k of Object.keys(env)) if (!envNamePattern.test(k) || k.endsWith("*")) throw invalidArgument(`${field}.env.${k}`, "invalid environment variable name");
  const envAllow = v.envAllow === undefined ? [...(base?.envAllow ?? [])] : stringList(v.envAllow, `${field}.envAllow`);
  envAllow.forEach((n, i) => {
    if (!envNamePattern.test(n)) throw invalidArgument(`${field}.envAllow[${String(i)}]`, `invalid name "${n}"`);
  });
  const profileName = v.profile === undefined ? (base?.profile ?? (bundle !== undefined ? "localai" : "plain")) : str(v.profile, `${field}.profile`);
  const profile = launchProfiles.find((p) => p === profileName);
  if (profile === undefined) throw invalidArgument(`${field}.profile`, `must be one of ${launchProfiles.join(", ")}, got "${profileName.slice(0, 32)}"`);
  const args = v.args === undefined ? [...(base?.args ?? [])] : stringList(v.args, `${field}.args`);
  if (profile === "localai") checkLocalaiEntry(field, args, env);
  const cwd = v.cwd === undefined ? (profile === "localai" ? localaiCwd(command) : base?.cwd) : str(v.cwd, `${field}.cwd`);
  return { command, args, env, envAllow, cwd, profile, ...backendTlsField(v.tls, `${field}.tls`), ...(bundle === undefined ? {} : { bundle }) };
}

function backendTlsField(v: unknown, field: string): Pick<CatalogEntry, "tls"> {
  if (v === undefined) return {};
  if (!isRecord(v)) throw invalidArgument(field, "must be a map with ca and optionally serverName");
  rejectUnknown(v, new Set(["ca", "serverName"]), field);
  const serverName = v.serverName === undefined ? undefined : str(v.serverName, `${field}.serverName`);
  return { tls: { caFile: str(v.ca, `${field}.ca`), serverName } };
}

/**
 * Validates a configuration object and fills in defaults (DESIGN §5). Every
 * unknown or invalid field throws INVALID_ARGUMENT whose message starts with the
 * field's path, e.g. `catalog.sim.command: must be an absolute path`.
 */
export function resolveAgentConfig(input: unknown, builtins: BuiltinCatalog = {}): AgentConfig {
  if (!isRecord(input)) throw invalidArgument("(root)", "config must be a map");
  rejectUnknown(input, topFields, "");
  const listen = hostPort(input.listen, "listen", "127.0.0.1:7443");
  const ports = input.ports;
  if (!isRecord(ports)) throw invalidArgument("ports", "required: {min, max, quarantine}");
  rejectUnknown(ports, new Set(["min", "max", "quarantine", "start"]), "ports");
  const portStart = ports.start ?? "first";
  if (portStart !== "first" && portStart !== "random") throw invalidArgument("ports.start", `expected first or random, got ${JSON.stringify(portStart)}`);
  const portMin = int(ports.min, "ports.min", undefined, 1, 65535);
  const portMax = int(ports.max, "ports.max", undefined, 1, 65535);
  if (portMax < portMin) throw invalidArgument("ports.max", `must be >= ports.min (${String(portMin)})`);
  const readinessIn = input.readiness ?? {};
  if (!isRecord(readinessIn)) throw invalidArgument("readiness", "must be a map");
  rejectUnknown(readinessIn, new Set(["attempts", "interval", "initialInterval"]), "readiness");
  const intervalMs = duration(readinessIn.interval, "readiness.interval", 2_000, maxIntervalMs);
  const readiness: ReadinessConfig = {
    attempts: int(readinessIn.attempts, "readiness.attempts", 20, 1, maxReadinessAttempts),
    intervalMs,
    initialIntervalMs: Math.min(intervalMs, duration(readinessIn.initialInterval, "readiness.initialInterval", 50, maxIntervalMs)),
  };
  if (intervalMs <= 0) throw invalidArgument("readiness.interval", "must be > 0");
  const catalogIn = input.catalog;
  if (!isRecord(catalogIn)) throw invalidArgument("catalog", "required: a map of backend name to {command, args, env, envAllow}");
  const catalog: Record<string, CatalogEntry> = {};
  const catalogNames = Object.keys(catalogIn);
  // The agent registers every name (placement skips a node lacking a model's backend); the coordinator takes at most this many.
  if (catalogNames.length > maxCatalogEntries) throw invalidArgument("catalog", `at most ${String(maxCatalogEntries)} backends, got ${String(catalogNames.length)}`);
  for (const [name, entry] of Object.entries(catalogIn)) {
    id(name, `catalog.${name}`);
    catalog[name] = catalogEntry(entry, `catalog.${name}`, builtins);
  }
  let modelsPath: string | undefined;
  if (input.modelsPath !== undefined) {
    const m = str(input.modelsPath, "modelsPath");
    if (!isAbsolute(m) || m.length > 4096) throw invalidArgument("modelsPath", `must be an absolute path (at most 4096 characters), got "${m.slice(0, 64)}"`);
    modelsPath = normalize(m);
  } else {
    const bundled = Object.keys(catalog).find((n) => catalog[n]?.bundle !== undefined);
    if (bundled !== undefined) throw invalidArgument("modelsPath", `required by catalog.${bundled} (a bundle): bundles are installed under it`);
    const needing = Object.keys(catalog).find((n) => catalog[n]?.profile === "localai");
    if (needing !== undefined) throw invalidArgument("modelsPath", `required by catalog.${needing} (profile localai): LocalAI's backends get the models directory as ModelPath and HF_HOME`);
  }
  for (const [name, entry] of Object.entries(catalog)) {
    if (entry.bundle === undefined || modelsPath === undefined) continue;
    const command = bundleRunPath(modelsPath, entry.bundle.sha256);
    const cwdGiven = isRecord(catalogIn[name]) && catalogIn[name].cwd !== undefined;
    catalog[name] = { ...entry, command, cwd: cwdGiven ? entry.cwd : entry.profile === "localai" ? localaiCwd(command) : entry.cwd };
  }
  const labels = stringMap(input.labels, "labels");
  for (const k of Object.keys(labels)) id(k, `labels.${k}`);
  const gpus = stringList(input.gpus, "gpus");
  if (gpus.length > maxGpusPerNode) throw invalidArgument("gpus", `at most ${String(maxGpusPerNode)} devices, got ${String(gpus.length)}`);
  gpus.forEach((g, i) => {
    if (!/^\d{1,3}$/.test(g)) throw invalidArgument(`gpus[${String(i)}]`, `must be a device index like "0", got "${g}"`);
  });
  return {
    nodeId: id(input.nodeId, "nodeId"),
    listen,
    advertiseAddress: hostPort(input.advertiseAddress, "advertiseAddress", listen),
    labels,
    backendHost: str(input.backendHost, "backendHost", "127.0.0.1"),
    portMin,
    portMax,
    portQuarantineMs: duration(ports.quarantine, "ports.quarantine", 30_000, maxDurationMs),
    portStart,
    stateDir: str(input.stateDir, "stateDir"),
    catalog,
    modelsPath,
    readiness,
    graceMs: duration(input.grace, "grace", 10_000, maxOperationTimeoutMs),
    loadDeadlineMs: duration(input.loadDeadline, "loadDeadline", 600_000, maxOperationTimeoutMs),
    stopDeadlineMs: duration(input.stopDeadline, "stopDeadline", 30_000, maxOperationTimeoutMs),
    freeTimeoutMs: duration(input.freeTimeout, "freeTimeout", 5_000, maxOperationTimeoutMs),
    artifactPullTimeoutMs: duration(input.artifactPullTimeout, "artifactPullTimeout", 3_600_000, maxDurationMs),
    artifactStallTimeoutMs: duration(input.artifactStallTimeout, "artifactStallTimeout", 30_000, maxOperationTimeoutMs),
    artifactCacheBudgetBytes: cacheBudget(input.artifactCacheBudget),
    nvidiaSmiPath: str(input.nvidiaSmi, "nvidiaSmi", "nvidia-smi"),
    gpus,
    heartbeatIntervalMs: duration(input.heartbeatInterval, "heartbeatInterval", 1_000, maxIntervalMs),
    logBufferLines: int(input.logBufferLines, "logBufferLines", 200, 1, maxLogBufferLines),
    adoptedPollMs: duration(input.adoptedPoll, "adoptedPoll", 1_000, maxIntervalMs),
    orphanScanIntervalMs: duration(input.orphanScanInterval, "orphanScanInterval", 10_000, maxIntervalMs),
    healthIntervalMs: duration(input.healthInterval, "healthInterval", 5_000, maxIntervalMs),
    tls: parseTlsFiles(input.tls, "tls"),
    insecure: insecureFlag(input.insecure),
    backendTokenFile: input.backendTokenFile === undefined ? "" : str(input.backendTokenFile, "backendTokenFile"),
    coordinatorTokenFile: input.coordinatorTokenFile === undefined ? "" : str(input.coordinatorTokenFile, "coordinatorTokenFile"),
    registryAuthFile: input.registryAuthFile === undefined ? "" : str(input.registryAuthFile, "registryAuthFile"),
    limits: parseAgentLimits(input.limits),
    placementLimits: parsePlacementLimits(input),
  };
}

function insecureFlag(v: unknown): boolean {
  if (v === undefined) return false;
  if (typeof v !== "boolean") throw invalidArgument("insecure", `must be true or false, got ${JSON.stringify(v)}`);
  return v;
}

/** Parses YAML text and validates it with {@link resolveAgentConfig}. */
export function parseAgentConfig(yamlText: string, builtins: BuiltinCatalog = {}): AgentConfig {
  let doc: unknown;
  const lines = new LineCounter();
  const parsed = parseDocument(yamlText, { lineCounter: lines });
  const yamlError = parsed.errors[0];
  if (yamlError !== undefined) throw invalidArgument("(yaml)", yamlError.message);
  try {
    doc = parsed.toJS();
  } catch (err) {
    throw invalidArgument("(yaml)", WardenError.from(err).rawMessage);
  }
  try {
    return resolveAgentConfig(doc, builtins);
  } catch (err) {
    throw withConfigLine(err, parsed, lines);
  }
}
