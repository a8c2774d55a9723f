/**
 * The disk side of placement: what a node must pull of a model's artifacts
 * and of its backend's bundle, whether its artifact cache has room for it,
 * and how to say so. Pure.
 */

/** One file a model names by digest (ModelSpec.artifacts, sizes only). */
export interface ArtifactNeed {
  readonly sha256: string;
  readonly sizeBytes: number;
}

/** What the node's agent reported of its artifact cache (heartbeat); all absent = not reported. */
export interface DiskFacts {
  /** Bytes the cache can take now without evicting: min(file system free, budget − held). */
  readonly diskFreeBytes?: number;
  /** Bytes of cached files no running backend uses: eviction reclaims them when a pull needs room. */
  readonly diskEvictableBytes?: number;
  /** Digests the node's cache holds (verified files). */
  readonly cachedDigests?: ReadonlySet<string>;
  /**
   * Catalog backend name → its bundle's state on the node (heartbeat), for
   * the backends whose catalog entry names a bundle. Absent, or no entry for
   * the model's backend: nothing to pull for the backend (an executable on
   * the node, or an agent that does not report bundles).
   */
  readonly backendBundles?: ReadonlyMap<string, BundleFact>;
}

/** One backend's bundle on a node: installed, or the bytes an install would pull. */
export interface BundleFact {
  readonly installed: boolean;
  /** Bytes an install would download (0 ≤ n ≤ 2^53 − 1); undefined when not known (an image whose manifest the agent has not read yet). */
  readonly pullBytes: number | undefined;
}

/** What a node must pull for a load: the model's missing artifacts plus its backend's bundle when not installed. */
export interface PullNeed {
  /** Everything to fetch, bundle included (its known size; an unknown size counts 0). */
  readonly bytes: number;
  /** The bundle's part of `bytes`; undefined when no bundle is involved or it is installed. */
  readonly bundleBytes: number | undefined;
  /** The model's backend has a bundle on this node: "installed", "missing" (size known), "unknown" (missing, size not known). */
  readonly bundle: "installed" | "missing" | "unknown" | undefined;
}

/** The bundle of `backend` on the node, when its agent reported one. */
export function bundleOf(backend: string | undefined, n: DiskFacts): BundleFact | undefined {
  return backend === undefined ? undefined : n.backendBundles?.get(backend);
}

/** What a load of a model with these artifacts on `backend` must pull on the node. */
export function pullNeedOf(artifacts: readonly ArtifactNeed[] | undefined, backend: string | undefined, n: DiskFacts): PullNeed {
  const bytes = pullBytesOf(artifacts, n);
  const b = bundleOf(backend, n);
  if (b === undefined) return { bytes, bundleBytes: undefined, bundle: undefined };
  if (b.installed) return { bytes, bundleBytes: undefined, bundle: "installed" };
  // An unknown size cannot rule a node out (it might fit); locality still ranks the node behind one with the bundle installed.
  if (b.pullBytes === undefined) return { bytes, bundleBytes: undefined, bundle: "unknown" };
  return { bytes: bytes + b.pullBytes, bundleBytes: b.pullBytes, bundle: "missing" };
}

/** Bytes the node must fetch: the artifacts whose digest its cache does not hold (each digest once). */
export function pullBytesOf(artifacts: readonly ArtifactNeed[] | undefined, n: DiskFacts): number {
  if (artifacts === undefined || artifacts.length === 0) return 0;
  let bytes = 0;
  // ≤ 16 artifacts per model (the config's bound): the quadratic dedup is cheaper than a Set.
  for (let i = 0; i < artifacts.length; i++) {
    const a = artifacts[i] as ArtifactNeed;
    if (n.cachedDigests?.has(a.sha256) === true) continue;
    let dup = false;
    for (let j = 0; j < i; j++) if ((artifacts[j] as ArtifactNeed).sha256 === a.sha256) dup = true;
    if (!dup) bytes += a.sizeBytes;
  }
  return bytes;
}

/**
 * Room the cache can make for a pull: its free bytes plus what eviction can
 * reclaim; +∞ when the agent reported no cache (an older agent, or no
 * report yet): such a node is not ruled out on disk, as before.
 */
export function diskRoomBytes(n: DiskFacts): number {
  if (n.diskFreeBytes === undefined) return Number.POSITIVE_INFINITY;
  return n.diskFreeBytes + (n.diskEvictableBytes ?? 0);
}

/** The reason a node without disk room for the pull is ruled out; undefined when it has room. */
export function diskExclusion(p: PullNeed, n: DiskFacts, explain: boolean): string | undefined {
  if (p.bytes === 0) return undefined;
  const room = diskRoomBytes(n);
  if (p.bytes <= room) return undefined;
  if (!explain) return "";
  const what = p.bundleBytes === undefined ? "its artifacts" : p.bundleBytes === p.bytes ? "its backend bundle" : "its artifacts and backend bundle";
  return `no disk room for ${what}: pull ${describeBytes(p)}, the artifact cache can make ${formatBytes(room)}`;
}

/**
 * What a node's reason ends with (ExplainPlacement): "cached" or
 * "pull 4.2 GiB" for the model's artifacts, "pull 5.2 GiB (bundle 1.0 GiB)"
 * when its backend's bundle is missing, "bundle cached" when installed,
 * "bundle not installed, size unknown"; "" when neither is involved.
 */
export function describePull(artifacts: readonly ArtifactNeed[] | undefined, p: PullNeed): string {
  const hasArtifacts = artifacts !== undefined && artifacts.length > 0;
  // Nothing to say (no artifacts, no bundle): the common case, once per node of an explanation.
  if (p.bytes <= 0 && !hasArtifacts && p.bundle !== "installed" && p.bundle !== "unknown") return "";
  const parts: string[] = [];
  if (p.bytes > 0) parts.push(`pull ${describeBytes(p)}`);
  else if (hasArtifacts) parts.push("cached");
  if (p.bundle === "installed") parts.push("bundle cached");
  else if (p.bundle === "unknown") parts.push("bundle not installed, size unknown");
  return parts.join(", ");
}

/** "5.2 GiB (bundle 1.0 GiB)": the total, with the bundle's part when it has one. */
function describeBytes(p: PullNeed): string {
  return p.bundleBytes === undefined || p.bundleBytes === 0 ? formatBytes(p.bytes) : `${formatBytes(p.bytes)} (bundle ${formatBytes(p.bundleBytes)})`;
}

/** Binary units with one decimal (4.2 GiB); bytes below 1 KiB as is. */
export function formatBytes(bytes: number): string {
  const units = ["KiB", "MiB", "GiB", "TiB"];
  if (bytes < 1024) return `${String(bytes)} B`;
  let v = bytes / 1024;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v.toFixed(1)} ${units[u] ?? "TiB"}`;
}
