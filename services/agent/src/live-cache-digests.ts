import type { CatalogEntry } from "./catalog-entry.js";
import type { BackendIdentity } from "./backend-process.js";

/**
 * The digests a live backend keeps out of the cache's evictions: its
 * artifacts' and its bundle's. The bundle is the record's, else (a record
 * that names none) the one its catalog entry names now, so an adopted
 * backend's bundle is kept too. Undefined when its artifacts are not known:
 * the cache then evicts nothing while it lives.
 */
export function liveCacheDigests(id: Pick<BackendIdentity, "backend" | "artifactDigests" | "bundleDigest">, catalog: Readonly<Record<string, CatalogEntry>>): readonly string[] | undefined {
  if (id.artifactDigests === undefined) return undefined;
  const bundle = id.bundleDigest ?? (Object.hasOwn(catalog, id.backend) ? catalog[id.backend]?.bundle?.sha256 : undefined);
  return bundle === undefined ? id.artifactDigests : [...id.artifactDigests, bundle];
}
