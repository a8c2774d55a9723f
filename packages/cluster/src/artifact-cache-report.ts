import type { BundleFact } from "@warden/placement";
import type { ArtifactCacheReport, BackendBundleStates } from "@warden/proto";
import type { NodeArtifactCache } from "./node-record.js";

/**
 * A heartbeat's artifact cache report over what the node had: the numbers
 * are replaced each time; the digest set and the bundle list only when the
 * report carries them (the agent sends each when it changed, after a
 * registration, and with every full inventory), so a beat without them
 * costs nothing here.
 */
export function artifactCacheOf(r: ArtifactCacheReport, old: NodeArtifactCache | undefined): NodeArtifactCache {
  const digests = r.digests === undefined ? old?.digests : new Set(r.digests.sha256.map((b) => Buffer.from(b).toString("hex")));
  const bundles = r.bundles === undefined ? old?.bundles : bundlesOf(r.bundles);
  return { freeBytes: Number(r.freeBytes), evictableBytes: Number(r.evictableBytes), digests, ...(bundles === undefined ? {} : { bundles }) };
}

/** The report's bundle states by backend name (validated before: names unique, sizes within 2^53 − 1). */
function bundlesOf(b: BackendBundleStates): ReadonlyMap<string, BundleFact> {
  const out = new Map<string, BundleFact>();
  for (const s of b.states) out.set(s.backend, { installed: s.installed, pullBytes: s.installed || !s.sizeKnown ? undefined : Number(s.pullBytes) });
  return out;
}
