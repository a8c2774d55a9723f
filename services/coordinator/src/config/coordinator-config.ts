import { parse as parseYaml } from "yaml";
import {
  Code,
  checkArtifacts,
  WardenError,
  checkIdentifier,
  invalidArgument,
  maxContextSize,
  maxDurationMs,
  maxEnforcementRetries,
  maxGroupNameLength,
  maxGroupsPerModel,
  maxIntervalMs,
  maxLimitPerNode,
  maxModels,
  maxOperationTimeoutMs,
  maxSizeBytes,
  parseDurationMs,
} from "@warden/common";
import { modelSpec, type ModelSpec } from "@warden/loader";
import { natsInboxPrefix } from "./nats-config.js";
import { parseHaConfig, type HaConfig } from "../ha/ha-config.js";
import type { PolicyPatch } from "@warden/watchdog";
import type { PlacementStrategy } from "@warden/placement";
import { parseTlsSettings, tlsSettingsFields, type TlsSettings } from "../auth/tls-settings.js";
import { checkModelFile, loadSettingFields, parseLoadSettings } from "./model-load-settings.js";
import { resolveAuthConfig, type AuthConfig } from "../auth/auth-config.js";
import { parseCoordinatorLimits, type CoordinatorLimits } from "./limits-config.js";
import { parseHttpSettings, httpSettingsFields, type HttpSettings } from "../http/http-settings.js";
import { modelReplicaFields, parseModelReplicas } from "./model-replica-config.js";
import { admissionSettings, type AdmissionSettings } from "@warden/admission";
import { modelRoutingFields, parseModelRouting } from "./model-routing-config.js";
import { parseTraceSettings, type TraceSettings } from "../trace/trace-config.js";

/** The coordinator's validated configuration. Durations in ms, sizes in bytes. TLS: see tls-settings.ts. */
export interface CoordinatorConfig extends TlsSettings, HttpSettings {
  /** Admin, Inference and Node services. @default "127.0.0.1:50051" */
  readonly listen: string;
  /** Where the journal (stop intents, outbox) and the embedded agent's records live. @default ".warden" */
  readonly stateDir: string;
  /**
   * The artifact store: a directory whose files agents read over NodeService.ReadArtifact
   * (a model artifact's `source: store:<path>`). undefined = no store (ReadArtifact answers
   * FAILED_PRECONDITION). services/agent/docs/artifacts.md.
   */
  readonly artifactStore: string | undefined;
  /** Run an embedded agent (single-machine mode, placement `local`). @default true */
  readonly embeddedAgent: boolean;
  /** The embedded agent's raw config (validated by the agent's own parser). */
  readonly agent: Readonly<Record<string, unknown>>;
  readonly placement: PlacementStrategy;
  readonly policy: PolicyPatch;
  readonly enforcement: { readonly maxAttempts: number; readonly intervalMs: number };
  readonly cooldown: { readonly baseMs: number; readonly maxMs: number };
  readonly stop: { readonly stopTimeoutMs: number; readonly freeTimeoutMs: number; readonly stopRpcTimeoutMs: number };
  /** Heartbeats older than this mark a node unreachable. @default 5000 */
  readonly nodeGraceMs: number;
  /**
   * Serve NodeService.HeartbeatStream (agents send their heartbeats on one
   * long-lived stream). false: it answers UNIMPLEMENTED and agents send unary
   * Heartbeats, as to a coordinator without it. @default true
   */
  readonly heartbeatStream: boolean;
  /**
   * Starts name a peer for each artifact to pull: a node that holds it or is
   * pulling it now (services/agent/docs/artifacts.md, "Peer-to-peer fetch").
   * false: every pull is from its origin. @default true
   */
  readonly peerFetch: boolean;
  /**
   * After a start over an existing journal or with remote agents, new loads
   * wait for agents to report their inventories (adoption first, so nothing
   * running is started twice): until every node the journal names has
   * reported or been lost, each for at most this long; this long when it
   * names none (recovery-window-at-start.ts). @default 3000
   */
  readonly recoveryWindowMs: number;
  /**
   * How long a load (on demand or `LoadModel`) waits when no node can take
   * the model now for a reason that ends by itself (its only matching node
   * draining or unreachable, no node ready yet), before every surface answers
   * UNAVAILABLE with the reason (HTTP 503 + Retry-After, CLI exit 3).
   * A load no node could ever take is refused at once. 0 to 1 day. @default 30000
   */
  readonly loadWaitMs: number;
  /** Orphans (processes without a complete record) older than this are stopped. @default 2 min */
  readonly orphanGraceMs: number;
  /** Unreachable this long → lost (its models may be placed elsewhere). @default 10 min */
  readonly nodeLostAfterMs: number;
  /**
   * While a node's agent is unreachable, the coordinator probes each of its
   * ready instances (the backend's Health RPC) this often; an instance serves
   * on while its probes answer. > 0, at most 1 h. @default 1000
   */
  readonly outageProbeIntervalMs: number;
  /** Deadline of one such probe. > 0, at most 1 h. @default 1000 */
  readonly outageProbeTimeoutMs: number;
  readonly models: readonly ModelSpec[];
  /** Models with an `admission:` block: their calls are gated (classes, fair sharing, shedding). */
  readonly admission: ReadonlyMap<string, AdmissionSettings>;
  /** NATS for the audit stream; undefined = events reach only the log and WatchEvents. */
  /** host:port of the Prometheus `/metrics` endpoint; undefined = off. */
  readonly metricsListen: string | undefined;
  /**
   * host:port of a data-plane listener serving only InferenceService (and
   * health) on a lean HTTP/2 server: the inference hot path without the
   * grpc-js server's per-call layers, and a port that can be exposed apart
   * from the admin API. `listen` serves InferenceService too. undefined = off.
   */
  readonly inferenceListen: string | undefined;
  /** Bearer tokens and roles (auth-config.ts); off by default. */
  readonly auth: AuthConfig;
  readonly nats: { readonly url: string; readonly token?: string; readonly user?: string; readonly pass?: string; readonly credsFile?: string; readonly inboxPrefix?: string } | undefined;
  /** Caps on messages, streams, waiters, nodes, heartbeats and watchers (limits-config.ts). */
  readonly limits: CoordinatorLimits;
  /** Leader lease and JetStream state (ha/ha-config.ts); undefined = single machine unless `--ha`. */
  readonly ha?: HaConfig | undefined;
  /** The workload trace under `<stateDir>/trace` (trace-config.ts); on by default. */
  readonly trace: TraceSettings;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function rejectUnknown(obj: Record<string, unknown>, allowed: readonly string[], path: string): void {
  for (const k of Object.keys(obj)) {
    if (!allowed.includes(k)) throw invalidArgument(path === "" ? k : `${path}.${k}`, `unknown field (allowed: ${allowed.join(", ")})`);
  }
}

function str(v: unknown, field: string, dflt?: string): string {
  if (v === undefined && dflt !== undefined) return dflt;
  if (typeof v !== "string" || v === "") throw invalidArgument(field, `must be a non-empty string, got ${v === undefined ? "nothing" : JSON.stringify(v)}`);
  return v;
}

function bool(v: unknown, field: string, dflt: boolean): boolean {
  if (v === undefined) return dflt;
  if (typeof v !== "boolean") throw invalidArgument(field, `must be true or false, got ${JSON.stringify(v)}`);
  return v;
}

/** A duration field; `maxMs` is its documented maximum (limits.ts). */
function duration(v: unknown, field: string, dfltMs: number, maxMs: number): number {
  if (v === undefined) return dfltMs;
  if (typeof v !== "string" && typeof v !== "number") throw invalidArgument(field, `must be a duration like "30s", got ${JSON.stringify(v)}`);
  return parseDurationMs(v, field, maxMs);
}

/** A duration that must be > 0 (a timeout of 0 would evict at once; a tick of 0 would spin). */
function positiveDuration(v: unknown, field: string, dfltMs: number, maxMs: number): number {
  const ms = duration(v, field, dfltMs, maxMs);
  if (ms <= 0) throw invalidArgument(field, "must be > 0");
  return ms;
}

function int(v: unknown, field: string, dflt: number, min: number, max: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) throw invalidArgument(field, `must be an integer in [${String(min)}, ${String(max)}], got ${JSON.stringify(v)}`);
  return v;
}

const sizeUnits: Readonly<Record<string, number>> = { "": 1, b: 1, kib: 1024, mib: 1024 ** 2, gib: 1024 ** 3, tib: 1024 ** 4, kb: 1e3, mb: 1e6, gb: 1e9, tb: 1e12 };

function sizeAtMost(bytes: number, field: string): number {
  if (bytes > maxSizeBytes) throw invalidArgument(field, `must be at most 1PiB (${String(maxSizeBytes)} bytes), got ${String(bytes)}`);
  return bytes;
}

/** Parses `"8GiB"`, `"512MiB"`, `"2GB"` or a number of bytes; at most 1 PiB (`maxSizeBytes`). */
export function parseSizeBytes(v: unknown, field: string): number {
  if (typeof v === "number") {
    if (!Number.isFinite(v) || v < 0) throw invalidArgument(field, `must be a size >= 0, got ${String(v)}`);
    return sizeAtMost(Math.round(v), field);
  }
  if (typeof v !== "string") throw invalidArgument(field, `must be a size like "8GiB", got ${JSON.stringify(v)}`);
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(v);
  const unit = sizeUnits[(m?.[2] ?? "?").toLowerCase()];
  if (m === null || unit === undefined) throw invalidArgument(field, `invalid size "${v}"; use e.g. "512MiB", "8GiB"`);
  return sizeAtMost(Math.round(Number(m[1]) * unit), field);
}

function stringList(v: unknown, field: string): string[] {
  if (v === undefined) return [];
  if (!Array.isArray(v) || v.some((x) => typeof x !== "string")) throw invalidArgument(field, "must be a list of strings");
  return v as string[];
}

function groupList(v: unknown, field: string): string[] {
  const groups = stringList(v, field);
  if (groups.length > maxGroupsPerModel) throw invalidArgument(field, `at most ${String(maxGroupsPerModel)} groups, got ${String(groups.length)}`);
  groups.forEach((g, i) => {
    if (g === "" || g.length > maxGroupNameLength) throw invalidArgument(`${field}[${String(i)}]`, `must be 1..${String(maxGroupNameLength)} characters`);
  });
  return groups;
}

function stringMap(v: unknown, field: string): Record<string, string> {
  if (v === undefined) return {};
  if (!isRecord(v)) throw invalidArgument(field, "must be a map of strings");
  for (const [k, x] of Object.entries(v)) {
    checkIdentifier(`${field} key`, k);
    if (typeof x !== "string") throw invalidArgument(`${field}.${k}`, "must be a string");
  }
  return v as Record<string, string>;
}

const modelFields = ["id", "backend", "options", "modelFile", "artifacts", "contextSize", "groups", "pinned", "memoryEstimate", "selector", "loadTimeout", "promptTemplate", "admission", ...loadSettingFields, ...modelReplicaFields, ...modelRoutingFields];

function model(v: unknown, field: string): ModelSpec {
  if (!isRecord(v)) throw invalidArgument(field, "must be a map");
  rejectUnknown(v, modelFields, field);
  const id = checkIdentifier(`${field}.id`, str(v["id"], `${field}.id`));
  return modelSpec({
    id,
    backend: str(v["backend"], `${field}.backend`),
    options: stringList(v["options"], `${field}.options`),
    modelFile: v["modelFile"] === undefined ? "" : checkModelFile(str(v["modelFile"], `${field}.modelFile`), `${field}.modelFile`),
    artifacts: checkArtifacts(`${field}.artifacts`, v["artifacts"]),
    contextSize: int(v["contextSize"], `${field}.contextSize`, 0, 0, maxContextSize),
    load: parseLoadSettings(v, field),
    groups: groupList(v["groups"], `${field}.groups`),
    pinned: bool(v["pinned"], `${field}.pinned`, false),
    sizeBytes: v["memoryEstimate"] === undefined ? 0 : parseSizeBytes(v["memoryEstimate"], `${field}.memoryEstimate`),
    selector: stringMap(v["selector"], `${field}.selector`),
    loadTimeoutMs: positiveDuration(v["loadTimeout"], `${field}.loadTimeout`, 600_000, maxOperationTimeoutMs),
    ...parseModelReplicas(v, field),
    routing: parseModelRouting(v, field),
  });
}

const policyFields = [
  "limitPerNode",
  "idleCheck",
  "idleTimeout",
  "busyCheck",
  "busyTimeout",
  "memoryReclaimer",
  "memoryThreshold",
  "forceEvictionWhenBusy",
  "sizeAware",
  "tickInterval",
  "enforcementRetries",
  "enforcementRetryInterval",
  "loadFailureCooldown",
  "loadFailureCooldownMax",
];

const topFields = ["listen", "stateDir", "artifactStore", "embeddedAgent", "agent", "placement", "policy", "stop", "nodeGrace", "heartbeatStream", "peerFetch", "nodeLostAfter", "outageProbeInterval", "outageProbeTimeout", "recoveryWindow", "loadWait", "orphanGrace", "models", "nats", "metricsListen", "inferenceListen", "auth", "limits", "ha", "trace", ...tlsSettingsFields, ...httpSettingsFields];

/**
 * Validates a parsed config object. Every error is INVALID_ARGUMENT naming the
 * path of the field and the problem, e.g. `models[1].memoryEstimate: invalid size "8 gigs"`.
 */
export function resolveCoordinatorConfig(input: unknown): CoordinatorConfig {
  if (input === undefined || input === null) input = {};
  if (!isRecord(input)) throw invalidArgument("(root)", "config must be a map");
  rejectUnknown(input, topFields, "");
  const p = input["policy"] ?? {};
  if (!isRecord(p)) throw invalidArgument("policy", "must be a map");
  rejectUnknown(p, policyFields, "policy");
  const threshold = p["memoryThreshold"];
  if (threshold !== undefined && (typeof threshold !== "number" || !(threshold > 0 && threshold <= 1))) throw invalidArgument("policy.memoryThreshold", `must be in (0, 1], got ${JSON.stringify(threshold)}`);
  const policy: PolicyPatch = {
    limitPerNode: int(p["limitPerNode"], "policy.limitPerNode", 0, 0, maxLimitPerNode),
    idleCheck: bool(p["idleCheck"], "policy.idleCheck", false),
    idleTimeoutMs: positiveDuration(p["idleTimeout"], "policy.idleTimeout", 900_000, maxDurationMs),
    busyCheck: bool(p["busyCheck"], "policy.busyCheck", false),
    busyTimeoutMs: positiveDuration(p["busyTimeout"], "policy.busyTimeout", 300_000, maxDurationMs),
    memoryReclaimer: bool(p["memoryReclaimer"], "policy.memoryReclaimer", false),
    ...(typeof threshold === "number" ? { memoryThreshold: threshold, memoryReleaseThreshold: Math.max(0.01, threshold - 0.05) } : {}),
    forceEvictionWhenBusy: bool(p["forceEvictionWhenBusy"], "policy.forceEvictionWhenBusy", false),
    sizeAware: bool(p["sizeAware"], "policy.sizeAware", false),
    tickIntervalMs: positiveDuration(p["tickInterval"], "policy.tickInterval", 500, maxIntervalMs),
  };
  const s = input["stop"] ?? {};
  if (!isRecord(s)) throw invalidArgument("stop", "must be a map");
  rejectUnknown(s, ["timeout", "freeTimeout", "rpcTimeout"], "stop");
  const rawModels = input["models"] ?? [];
  if (!Array.isArray(rawModels)) throw invalidArgument("models", "must be a list");
  if (rawModels.length > maxModels) throw invalidArgument("models", `at most ${String(maxModels)} models, got ${String(rawModels.length)}`);
  const models = rawModels.map((m, i) => model(m, `models[${String(i)}]`));
  const seen = new Set<string>();
  const admission = new Map<string, AdmissionSettings>();
  for (const [i, m] of models.entries()) {
    if (seen.has(m.id)) throw invalidArgument(`models[${String(i)}].id`, `duplicate model id "${m.id}"`);
    seen.add(m.id);
    const raw: unknown = (rawModels[i] as Record<string, unknown>)["admission"];
    if (raw !== undefined) admission.set(m.id, admissionSettings(`models[${String(i)}].admission`, raw, m.replicas.targetInFlight));
  }
  const placement = input["placement"] ?? "binpack";
  if (placement !== "binpack" && placement !== "spread") throw invalidArgument("placement", `must be "binpack" or "spread", got ${JSON.stringify(placement)}`);
  const agent = input["agent"] ?? {};
  if (!isRecord(agent)) throw invalidArgument("agent", "must be a map");
  const n = input["nats"];
  let nats: CoordinatorConfig["nats"];
  if (n !== undefined) {
    if (!isRecord(n)) throw invalidArgument("nats", "must be a map");
    rejectUnknown(n, ["url", "token", "user", "pass", "credsFile", "inboxPrefix"], "nats");
    nats = {
      url: str(n["url"], "nats.url"),
      ...(n["token"] === undefined ? {} : { token: str(n["token"], "nats.token") }),
      ...(n["user"] === undefined ? {} : { user: str(n["user"], "nats.user") }),
      ...(n["pass"] === undefined ? {} : { pass: str(n["pass"], "nats.pass") }),
      ...(n["credsFile"] === undefined ? {} : { credsFile: str(n["credsFile"], "nats.credsFile") }),
      ...natsInboxPrefix(n["inboxPrefix"]),
    };
  }
  return {
    listen: str(input["listen"], "listen", "127.0.0.1:50051"),
    stateDir: str(input["stateDir"], "stateDir", ".warden"),
    artifactStore: input["artifactStore"] === undefined ? undefined : str(input["artifactStore"], "artifactStore"),
    embeddedAgent: bool(input["embeddedAgent"], "embeddedAgent", true),
    agent,
    placement,
    policy,
    enforcement: {
      maxAttempts: int(p["enforcementRetries"], "policy.enforcementRetries", 30, 1, maxEnforcementRetries),
      intervalMs: duration(p["enforcementRetryInterval"], "policy.enforcementRetryInterval", 1_000, maxIntervalMs),
    },
    cooldown: {
      baseMs: duration(p["loadFailureCooldown"], "policy.loadFailureCooldown", 10_000, maxDurationMs),
      maxMs: duration(p["loadFailureCooldownMax"], "policy.loadFailureCooldownMax", 300_000, maxDurationMs),
    },
    stop: {
      stopTimeoutMs: duration(s["timeout"], "stop.timeout", 30_000, maxOperationTimeoutMs),
      freeTimeoutMs: duration(s["freeTimeout"], "stop.freeTimeout", 5_000, maxOperationTimeoutMs),
      stopRpcTimeoutMs: duration(s["rpcTimeout"], "stop.rpcTimeout", 15_000, maxOperationTimeoutMs),
    },
    nodeGraceMs: duration(input["nodeGrace"], "nodeGrace", 5_000, maxDurationMs),
    heartbeatStream: bool(input["heartbeatStream"], "heartbeatStream", true),
    peerFetch: bool(input["peerFetch"], "peerFetch", true),
    nodeLostAfterMs: duration(input["nodeLostAfter"], "nodeLostAfter", 600_000, maxDurationMs),
    outageProbeIntervalMs: positiveDuration(input["outageProbeInterval"], "outageProbeInterval", 1_000, maxIntervalMs),
    outageProbeTimeoutMs: positiveDuration(input["outageProbeTimeout"], "outageProbeTimeout", 1_000, maxIntervalMs),
    recoveryWindowMs: duration(input["recoveryWindow"], "recoveryWindow", 3_000, maxDurationMs),
    loadWaitMs: duration(input["loadWait"], "loadWait", 30_000, maxOperationTimeoutMs),
    orphanGraceMs: duration(input["orphanGrace"], "orphanGrace", 120_000, maxDurationMs),
    metricsListen: input["metricsListen"] === undefined ? undefined : str(input["metricsListen"], "metricsListen"),
    inferenceListen: input["inferenceListen"] === undefined ? undefined : str(input["inferenceListen"], "inferenceListen"),
    models,
    admission,
    nats,
    ...parseTlsSettings(input),
    ...parseHttpSettings(input),
    auth: resolveAuthConfig(input["auth"]),
    limits: parseCoordinatorLimits(input["limits"]),
    ha: parseHaConfig(input["ha"]),
    trace: parseTraceSettings(input["trace"]),
  };
}

/** Parses and validates YAML config text; YAML syntax errors are INVALID_ARGUMENT with line information. */
export function parseCoordinatorConfig(yamlText: string): CoordinatorConfig {
  let doc: unknown;
  try {
    doc = parseYaml(yamlText);
  } catch (err) {
    throw new WardenError(Code.InvalidArgument, `config: YAML syntax error: ${err instanceof Error ? err.message : String(err)}`);
  }
  return resolveCoordinatorConfig(doc);
}
