import { isAbsolute, normalize } from "node:path";
import { LineCounter, parseDocument } from "yaml";
import {
  WardenError,
  invalidArgument,
  maxDurationMs,
  maxGpusPerNode,
  maxIntervalMs,
  maxLogBufferLines,
  maxOperationTimeoutMs,
  maxReadinessAttempts,
  parseMemoryBudget,
} from "@warden/common";
import { parseTlsFiles, type TlsFiles } from "@warden/grpc";
import { withConfigLine } from "./config-line.js";
import { bundleRunPath } from "./backend-bundle-config.js";
import { localaiCwd } from "./launch-profile.js";
import { catalogEntry, type BuiltinCatalog, type CatalogEntry } from "./catalog-entry.js";
import { duration, flag, hostPort, id, int, isRecord, rejectUnknown, str, stringList, stringMap } from "./config-fields.js";
import { parseAgentLimits, type AgentLimits } from "./agent-limits-config.js";
import { parsePlacementLimits, type AgentPlacementLimits } from "./agent-placement-limits.js";

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
  /** Take part in peer-to-peer fetch (docs/artifacts.md): false = no peer key, so the coordinator names this node as nobody's peer and names it none. @default true */
  peerFetch: boolean;
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
const topFields = new Set([
  "nodeId", "listen", "advertiseAddress", "labels", "backendHost", "ports", "stateDir", "catalog", "modelsPath", "readiness",
  "grace", "loadDeadline", "stopDeadline", "freeTimeout", "artifactPullTimeout", "artifactStallTimeout", "artifactCacheBudget", "nvidiaSmi", "gpus", "heartbeatInterval",
  "logBufferLines", "adoptedPoll", "orphanScanInterval", "healthInterval", "tls", "insecure", "peerFetch", "backendTokenFile", "coordinatorTokenFile", "registryAuthFile", "limits",
  "maxReplicasPerModel", "memoryBudget",
]);

/** `artifactCacheBudget`: a size (no percentage), at least 1 KiB. */
function cacheBudget(v: unknown): number | undefined {
  const b = parseMemoryBudget(v, "artifactCacheBudget");
  if (b === undefined) return undefined;
  if (b.t !== "bytes" || b.bytes < 1024) throw invalidArgument("artifactCacheBudget", `must be a size like "200GiB", at least 1KiB, got ${JSON.stringify(v).slice(0, 64)}`);
  return b.bytes;
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
    insecure: flag(input.insecure, "insecure", false),
    peerFetch: flag(input.peerFetch, "peerFetch", true),
    backendTokenFile: input.backendTokenFile === undefined ? "" : str(input.backendTokenFile, "backendTokenFile"),
    coordinatorTokenFile: input.coordinatorTokenFile === undefined ? "" : str(input.coordinatorTokenFile, "coordinatorTokenFile"),
    registryAuthFile: input.registryAuthFile === undefined ? "" : str(input.registryAuthFile, "registryAuthFile"),
    limits: parseAgentLimits(input.limits),
    placementLimits: parsePlacementLimits(input),
  };
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
