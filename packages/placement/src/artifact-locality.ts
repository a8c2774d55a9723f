/**
 * The disk side of placement: what a node must pull of a model's artifacts,
 * whether its artifact cache has room for it, and how to say so. Pure.
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
export function diskExclusion(pullBytes: number, n: DiskFacts, explain: boolean): string | undefined {
  if (pullBytes === 0) return undefined;
  const room = diskRoomBytes(n);
  if (pullBytes <= room) return undefined;
  return explain ? `no disk room for its artifacts: pull ${formatBytes(pullBytes)}, the artifact cache can make ${formatBytes(room)}` : "";
}

/** "cached" or "pull 4.2 GiB" (ExplainPlacement, per node); "" for a model without artifacts. */
export function describePull(artifacts: readonly ArtifactNeed[] | undefined, pullBytes: number): string {
  if (artifacts === undefined || artifacts.length === 0) return "";
  return pullBytes === 0 ? "cached" : `pull ${formatBytes(pullBytes)}`;
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
