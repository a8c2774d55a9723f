import type { ArtifactCacheReport } from "@warden/proto";
import type { NodeArtifactCache } from "./node-record.js";

/**
 * A heartbeat's artifact cache report over what the node had: the numbers
 * are replaced each time; the digest set only when the report carries one
 * (the agent sends it when it changed, after a registration, and with every
 * full inventory), so a beat without one costs nothing here.
 */
export function artifactCacheOf(r: ArtifactCacheReport, old: NodeArtifactCache | undefined): NodeArtifactCache {
  const digests = r.digests === undefined ? old?.digests : new Set(r.digests.sha256.map((b) => Buffer.from(b).toString("hex")));
  return { freeBytes: Number(r.freeBytes), evictableBytes: Number(r.evictableBytes), digests };
}
