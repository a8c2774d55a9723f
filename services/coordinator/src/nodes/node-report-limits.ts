import { BackendState, type ArtifactCacheReport, type BackendBundleState, type ForeignProcess, type GpuInfo, type HeartbeatRequest, type InventoryEntry, type NodeResources, type OrphanProcess, type RegisterRequest } from "@warden/proto";
import { capExceeded, echoValue, identifierPattern, identifierRule, invalidArgument, isHex64 } from "@warden/common";
import { nodeLimitsFromWire } from "./node-limits-wire.js";

/**
 * Bounds on what one Register or Heartbeat may carry. Everything a peer sends
 * is client input: a report over any bound is refused whole (INVALID_ARGUMENT
 * naming the field) before any of it is applied, so a rejected report changes
 * nothing. The caps compose with the watchdog's: leftovers (≤ maxInventory)
 * plus orphans (≤ maxOrphans) stay under its 10 000 occupancy entries per node,
 * and maxGpus equals its 64 devices per node.
 */
export const nodeReportLimits = Object.freeze({
  /** Inventory entries per heartbeat. */
  maxInventory: 4096,
  /** Orphan processes per heartbeat. */
  maxOrphans: 1024,
  /** Foreign processes per heartbeat. */
  maxForeign: 1024,
  /** GPUs per Register and per heartbeat's resources. */
  maxGpus: 64,
  /** Highest GPU index accepted. */
  maxGpuIndex: 1023,
  /** Labels per Register. */
  maxLabels: 64,
  /** Label key length; keys are identifiers (@warden/common identifier.ts), as the agent's config requires. */
  maxLabelKeyChars: 128,
  /** Label value length; printable characters, may be empty. */
  maxLabelValueChars: 256,
  /** host:port length. */
  maxAddressChars: 256,
  /** Free text (orphan/foreign detail, GPU name, orphan model, backend name, stop reason). */
  maxTextChars: 256,
  /** Agent version string. */
  maxVersionChars: 64,
  /** Catalog backend names per Register (each matches catalogNamePattern, no duplicates). */
  maxCatalogBackends: 256,
  /** Byte counts (memory, GPU, RAM): at most 2^53 − 1, so sums stay exact. */
  maxBytes: Number.MAX_SAFE_INTEGER,
  /** Pids listed in one coalesced orphan.adopted event (the proto's "first ≤ 8"). */
  orphanEventPids: 8,
});

/** Node ids, incarnations and model ids: the shared identifier syntax (@warden/common identifier.ts). */
export const nodeIdPattern = identifierPattern;
/** host:port of a remote agent or backend; `in-process` is not an address (only the embedded agent is in process). */
const hostPortPattern = /^[A-Za-z0-9.\-[\]:]+:\d{1,5}$/;
/** A catalog backend name: the same identifier syntax, so every name an agent accepts in its catalog is accepted here. */
export const catalogNamePattern = identifierPattern;
/** The address the embedded agent registers with; refused from any remote peer. */
export const inProcessAddress = "in-process";

const L = nodeReportLimits;
const maxBytesBig = BigInt(L.maxBytes);

function hasControlChars(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) return true;
  }
  return false;
}

const echo = echoValue;

function checkId(field: string, v: string): void {
  if (!nodeIdPattern.test(v)) throw invalidArgument(field, `${echo(v)} is not a valid id (${identifierRule})`);
}

function checkHostPort(field: string, v: string, optional: boolean): void {
  if (optional && v === "") return;
  const port = Number(v.slice(v.lastIndexOf(":") + 1));
  if (v.length > L.maxAddressChars || !hostPortPattern.test(v) || port < 1 || port > 65535) {
    throw invalidArgument(field, `must be host:port (port 1..65535, at most ${String(L.maxAddressChars)} characters), got ${echo(v)}`);
  }
}

function checkText(field: string, v: string, max: number = L.maxTextChars): void {
  if (v.length > max || hasControlChars(v)) throw invalidArgument(field, `must be at most ${String(max)} printable characters`);
}

function checkBytes(field: string, v: bigint): void {
  if (v > maxBytesBig) throw invalidArgument(field, `must be at most ${String(L.maxBytes)} bytes`);
}

function checkCount(field: string, n: number, max: number): void {
  if (n > max) throw invalidArgument(field, `at most ${String(max)} entries, got ${String(n)}`);
}

/** A per-heartbeat cap (what a node accumulates at run time): RESOURCE_EXHAUSTED naming the list. */
function checkCap(field: string, n: number, max: number): void {
  if (n > max) throw capExceeded(field, `at most ${String(max)} entries per heartbeat, got ${String(n)}`);
}

function checkGpus(field: string, gpus: readonly GpuInfo[]): void {
  checkCount(field, gpus.length, L.maxGpus);
  const seen = new Set<number>();
  gpus.forEach((g, i) => {
    const f = `${field}[${String(i)}]`;
    if (g.index > L.maxGpuIndex) throw invalidArgument(`${f}.index`, `must be at most ${String(L.maxGpuIndex)}`);
    if (seen.has(g.index)) throw invalidArgument(`${f}.index`, `duplicate GPU index ${String(g.index)}`);
    seen.add(g.index);
    checkText(`${f}.name`, g.name);
    checkBytes(`${f}.total_bytes`, g.totalBytes);
    checkBytes(`${f}.used_bytes`, g.usedBytes);
  });
}

function checkLabels(labels: Readonly<Record<string, string>>): void {
  const keys = Object.keys(labels);
  checkCount("labels", keys.length, L.maxLabels);
  for (const k of keys) {
    if (k.length > L.maxLabelKeyChars || !identifierPattern.test(k)) {
      throw invalidArgument("labels", `key ${echo(k)} is not a valid id (${identifierRule})`);
    }
    checkText(`labels[${JSON.stringify(k)}]`, labels[k] ?? "", L.maxLabelValueChars);
  }
}

function checkCatalog(names: readonly string[]): void {
  checkCount("backends", names.length, L.maxCatalogBackends);
  const seen = new Set<string>();
  names.forEach((name, i) => {
    const f = `backends[${String(i)}]`;
    if (!catalogNamePattern.test(name)) throw invalidArgument(f, `${echo(name)} is not a valid id (${identifierRule})`);
    if (seen.has(name)) throw invalidArgument(f, `duplicate backend ${echo(name)}`);
    seen.add(name);
  });
}


/** Register.backend_bundles: at most maxCatalogBackends entries, each a catalog name to a sha256. */
function checkBackendBundles(bundles: Readonly<Record<string, string>>): void {
  const names = Object.keys(bundles);
  checkCount("backend_bundles", names.length, L.maxCatalogBackends);
  for (const name of names) {
    const f = `backend_bundles[${JSON.stringify(name.slice(0, 64))}]`;
    if (!catalogNamePattern.test(name)) throw invalidArgument(f, `${echo(name)} is not a valid id (${identifierRule})`);
    if (!isHex64(bundles[name] ?? "")) throw invalidArgument(f, "must be 64 lowercase hex digits (a sha256)");
  }
}

const knownStates = new Set<number>([BackendState.SPAWNING, BackendState.LOADING, BackendState.READY, BackendState.STOPPING, BackendState.EXITED]);

function checkInventory(backends: readonly InventoryEntry[], maxInventory: number, field = "backends"): Set<string> {
  checkCap(field, backends.length, maxInventory);
  const seen = new Set<string>();
  backends.forEach((e, i) => {
    const f = `${field}[${String(i)}]`;
    checkId(`${f}.incarnation`, e.incarnation);
    if (seen.has(e.incarnation)) throw invalidArgument(`${f}.incarnation`, `duplicate incarnation ${echo(e.incarnation)}`);
    seen.add(e.incarnation);
    checkId(`${f}.model`, e.model);
    checkHostPort(`${f}.address`, e.address, false);
    if (!knownStates.has(e.state)) throw invalidArgument(`${f}.state`, `unknown backend state ${String(e.state)}`);
    checkBytes(`${f}.memory_bytes`, e.memoryBytes);
    checkText(`${f}.gpu_device`, e.gpuDevice);
    checkText(`${f}.backend`, e.backend);
    if (e.bundleDigest !== "" && !isHex64(e.bundleDigest)) throw invalidArgument(`${f}.bundle_digest`, "must be empty or 64 lowercase hex digits (a sha256)");
    if (e.stopRequested !== undefined) {
      if (e.stopRequested.incarnation !== "") checkId(`${f}.stop_requested.incarnation`, e.stopRequested.incarnation);
      checkText(`${f}.stop_requested.reason`, e.stopRequested.reason);
    }
  });
  return seen;
}

/**
 * A delta heartbeat (HeartbeatRequest.delta): `backends` empty, the base an
 * earlier sequence, upserts as inventory entries, removals unique ids not
 * also upserted, each list within the inventory cap. Whether the base is the
 * one the coordinator holds is the node table's question (a mismatch asks
 * for a full inventory, it is no error).
 */
function checkDelta(req: HeartbeatRequest, maxInventory: number): void {
  const d = req.delta;
  if (d === undefined) return;
  if (req.backends.length > 0) throw invalidArgument("backends", "must be empty when delta is set (the delta carries the changes)");
  if (d.baseSequence >= req.sequence) throw invalidArgument("delta.base_sequence", `must be below the heartbeat's sequence (${req.sequence.toString()}), got ${d.baseSequence.toString()}`);
  const upserted = checkInventory(d.upserts, maxInventory, "delta.upserts");
  checkCap("delta.removed", d.removed.length, maxInventory);
  const seen = new Set<string>();
  d.removed.forEach((inc, i) => {
    const f = `delta.removed[${String(i)}]`;
    checkId(f, inc);
    if (seen.has(inc) || upserted.has(inc)) throw invalidArgument(f, `${echo(inc)} is listed twice in the delta`);
    seen.add(inc);
  });
}

function checkOrphans(orphans: readonly OrphanProcess[], maxOrphans: number): void {
  checkCap("orphans", orphans.length, maxOrphans);
  orphans.forEach((o, i) => {
    const f = `orphans[${String(i)}]`;
    if (o.pid === 0) throw invalidArgument(`${f}.pid`, "must be a process id > 0");
    // An orphan named by a partial record carries whatever that file said (its
    // address and model may be damaged): printable and bounded, not host:port
    // or a configured id, so one bad file on a node cannot get all its reports refused.
    checkText(`${f}.address`, o.address, L.maxAddressChars);
    checkBytes(`${f}.memory_bytes`, o.memoryBytes);
    checkText(`${f}.model`, o.model);
    checkText(`${f}.detail`, o.detail);
  });
}

function checkForeign(foreign: readonly ForeignProcess[]): void {
  checkCap("foreign", foreign.length, L.maxForeign);
  foreign.forEach((p, i) => {
    const f = `foreign[${String(i)}]`;
    // pid 0 is allowed: an agent that may not inspect another user's process
    // still reports the socket (owner unknown) rather than hide it.
    checkHostPort(`${f}.address`, p.address, true);
    checkText(`${f}.detail`, p.detail);
  });
}

function checkResources(r: NodeResources): void {
  checkGpus("resources.gpus", r.gpus);
  checkBytes("resources.ram_total_bytes", r.ramTotalBytes);
  checkBytes("resources.ram_used_bytes", r.ramUsedBytes);
}

/**
 * Validates a whole Register before any of it is applied. `inProcessAllowed`
 * only for the embedded agent's own in-process call: a remote peer may not
 * claim the `in-process` address.
 */
export function validateRegister(req: RegisterRequest, inProcessAllowed: boolean): void {
  checkId("node_id", req.nodeId);
  if (req.address === inProcessAddress) {
    if (!inProcessAllowed) throw invalidArgument("address", `"${inProcessAddress}" is reserved for the coordinator's embedded agent; a remote agent registers its host:port`);
  } else {
    checkHostPort("address", req.address, false);
  }
  checkLabels(req.labels);
  checkGpus("gpus", req.gpus);
  checkBytes("ram_total_bytes", req.ramTotalBytes);
  checkText("version", req.version, L.maxVersionChars);
  checkCatalog(req.backends);
  checkBackendBundles(req.backendBundles);
  nodeLimitsFromWire(req.limits, "limits");
}

/** The configurable per-heartbeat caps (coordinator `limits.maxInventoryPerHeartbeat` / `maxOrphansPerHeartbeat`). */
export interface HeartbeatCaps {
  readonly maxInventory: number;
  readonly maxOrphans: number;
}

/**
 * Validates a whole Heartbeat (inventory, orphans, foreign processes,
 * resources) before any of it is applied. Over a per-heartbeat cap is
 * RESOURCE_EXHAUSTED; anything malformed INVALID_ARGUMENT.
 */
export function validateHeartbeat(req: HeartbeatRequest, caps: HeartbeatCaps = L): void {
  checkId("node_id", req.nodeId);
  checkInventory(req.backends, caps.maxInventory);
  checkDelta(req, caps.maxInventory);
  checkOrphans(req.orphans, caps.maxOrphans);
  checkForeign(req.foreign);
  if (req.resources !== undefined) checkResources(req.resources);
  if (req.artifactCache !== undefined) checkArtifactCache(req.artifactCache);
}

/** Digests per artifact cache report: the agent's cache index bound. */
export const maxCachedDigests = 65_536;

function checkArtifactCache(c: ArtifactCacheReport): void {
  checkBytes("artifact_cache.free_bytes", c.freeBytes);
  checkBytes("artifact_cache.evictable_bytes", c.evictableBytes);
  const ds = c.digests?.sha256 ?? [];
  checkCount("artifact_cache.digests.sha256", ds.length, maxCachedDigests);
  const i = ds.findIndex((d) => d.length !== 32);
  if (i >= 0) throw invalidArgument(`artifact_cache.digests.sha256[${String(i)}]`, `must be 32 bytes (a SHA-256), got ${String(ds[i]?.length ?? 0)}`);
  if (c.bundles !== undefined) checkBundleStates(c.bundles.states);
  checkCount("artifact_cache.evictions", c.evictions.length, maxEvictionsPerHeartbeat);
  c.evictions.forEach((e, j) => {
    const field = `artifact_cache.evictions[${String(j)}]`;
    if (e.sha256.length !== 32) throw invalidArgument(`${field}.sha256`, `must be 32 bytes (a SHA-256), got ${String(e.sha256.length)}`);
    checkBytes(`${field}.size_bytes`, e.sizeBytes);
    if (e.reason.length > maxEvictionReasonChars) throw invalidArgument(`${field}.reason`, `at most ${String(maxEvictionReasonChars)} characters`);
  });
  checkCount("artifact_cache.pulls", c.pulls.length, maxPullsPerHeartbeat);
  c.pulls.forEach((p, j) => {
    const field = `artifact_cache.pulls[${String(j)}]`;
    if (p.sha256.length !== 32) throw invalidArgument(`${field}.sha256`, `must be 32 bytes (a SHA-256), got ${String(p.sha256.length)}`);
    checkBytes(`${field}.size_bytes`, p.sizeBytes);
    checkPullText(`${field}.path`, p.path);
    checkPullText(`${field}.origin`, p.origin);
    checkOptionalId(`${field}.model`, p.model);
    checkOptionalId(`${field}.backend`, p.backend);
    checkCount(`${field}.sources`, p.sources.length, maxPullSources);
    p.sources.forEach((s, k) => {
      checkOptionalId(`${field}.sources[${String(k)}].peer_node_id`, s.peerNodeId);
      checkBytes(`${field}.sources[${String(k)}].bytes`, s.bytes);
    });
    checkBytes(`${field}.resumed_bytes`, p.resumedBytes);
    if (p.durationMs > maxBytesBig) throw invalidArgument(`${field}.duration_ms`, `must be at most ${String(L.maxBytes)}`);
  });
  checkCount("artifact_cache.bundle_installs", c.bundleInstalls.length, maxBundleInstallsPerHeartbeat);
  c.bundleInstalls.forEach((b, j) => {
    const field = `artifact_cache.bundle_installs[${String(j)}]`;
    if (b.sha256.length !== 32) throw invalidArgument(`${field}.sha256`, `must be 32 bytes (a SHA-256), got ${String(b.sha256.length)}`);
    if (!catalogNamePattern.test(b.backend)) throw invalidArgument(`${field}.backend`, `${echo(b.backend)} is not a valid id (${identifierRule})`);
    checkPullText(`${field}.source`, b.source);
    if (!nodeIdPattern.test(b.model)) throw invalidArgument(`${field}.model`, `${echo(b.model)} is not a valid id (${identifierRule})`);
    if (!nodeIdPattern.test(b.incarnation)) throw invalidArgument(`${field}.incarnation`, `${echo(b.incarnation)} is not a valid id (${identifierRule})`);
  });
}

/** An id that may be empty (a pull's model or backend, a source's peer: "" = none, the origin). */
function checkOptionalId(field: string, v: string): void {
  if (v !== "" && !nodeIdPattern.test(v)) throw invalidArgument(field, `${echo(v)} is not a valid id (${identifierRule})`);
}

/** A pull's path or source: at most 256 characters, no control characters. */
function checkPullText(field: string, v: string): void {
  if (v.length > maxPullTextChars || hasControlChars(v)) throw invalidArgument(field, `at most ${String(maxPullTextChars)} characters without control characters`);
}

/** Completed pulls one heartbeat may carry (the agent's report-outbox.ts sends at most this many). */
export const maxPullsPerHeartbeat = 32;
/** Bundle installs by starts one heartbeat may carry (report-outbox.ts). */
export const maxBundleInstallsPerHeartbeat = 16;
/** Sources of one pull: the 8 peers a start may name and the origin. */
const maxPullSources = 9;
const maxPullTextChars = 256;

/**
 * ArtifactCacheReport.bundles: at most maxCatalogBackends states (one per
 * catalog backend), each a catalog name, once; pull_bytes within 2^53 − 1.
 */
function checkBundleStates(states: readonly BackendBundleState[]): void {
  checkCount("artifact_cache.bundles.states", states.length, L.maxCatalogBackends);
  const seen = new Set<string>();
  states.forEach((s, i) => {
    const f = `artifact_cache.bundles.states[${String(i)}]`;
    if (!catalogNamePattern.test(s.backend)) throw invalidArgument(`${f}.backend`, `${echo(s.backend)} is not a valid id (${identifierRule})`);
    if (seen.has(s.backend)) throw invalidArgument(`${f}.backend`, `duplicate backend ${echo(s.backend)}`);
    seen.add(s.backend);
    checkBytes(`${f}.pull_bytes`, s.pullBytes);
  });
}

/** Evictions one heartbeat may carry (the agent's eviction-outbox.ts sends at most this many). */
export const maxEvictionsPerHeartbeat = 64;
const maxEvictionReasonChars = 256;
