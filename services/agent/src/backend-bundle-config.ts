import { join } from "node:path";
import { WardenError, checkArtifacts, invalidArgument, isHex64, isOciSource, parseOciReference, type ArtifactSpec } from "@warden/common";

/**
 * A backend installed from a bundle instead of an executable already on the
 * node: an OCI image (`oci://host/repo@sha256:<manifest digest>`; LocalAI
 * publishes its backends this way) or a tarball (`https://…`, `store:…`)
 * with its sha256 and size. Its layers (or the tarball) unpack to a directory
 * holding `run.sh`, which the catalog entry runs (backend-bundle.ts).
 */
export interface BundleSpec {
  readonly source: string;
  /** The manifest's digest (OCI) or the tarball's, 64 hex. */
  readonly sha256: string;
  /** The tarball's size; undefined for an OCI image (the manifest gives each layer's). */
  readonly sizeBytes: number | undefined;
}

/** Where a bundle is installed: `<modelsPath>/.warden-cache/backends/<sha256>`. */
export function bundleDir(modelsPath: string, sha256: string): string {
  return join(modelsPath, ".warden-cache", "backends", sha256);
}

/** The executable a bundle's catalog entry runs. */
export function bundleRunPath(modelsPath: string, sha256: string): string {
  return join(bundleDir(modelsPath, sha256), "run.sh");
}

/**
 * `catalog.<name>.bundle`: `{source, sha256, sizeBytes}` for a tarball, or
 * `{source: oci://…@sha256:<hex>}` for an image (a `sha256` beside it must
 * agree; a tag alone is refused, so a node never runs what a retag put there).
 */
export function checkBundle(field: string, v: unknown): BundleSpec {
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw invalidArgument(field, "must be a map with source (and sha256, sizeBytes for a tarball)");
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!["source", "sha256", "sizeBytes"].includes(k)) throw invalidArgument(`${field}.${k}`, "unknown field (allowed: source, sha256, sizeBytes)");
  if (typeof o.source !== "string") throw invalidArgument(`${field}.source`, o.source === undefined ? "required" : "must be a string");
  if (isOciSource(o.source)) {
    if (o.source.length > 2048) throw invalidArgument(`${field}.source`, "must be at most 2048 characters");
    const ref = parseOciReference(`${field}.source`, o.source);
    const sha256 = ref.digest ?? (typeof o.sha256 === "string" ? o.sha256 : undefined);
    if (sha256 === undefined || !isHex64(sha256)) throw invalidArgument(`${field}.source`, "an image must be pinned: oci://host/repository[:tag]@sha256:<manifest digest>, or give sha256");
    if (ref.digest !== undefined && o.sha256 !== undefined && o.sha256 !== ref.digest) throw invalidArgument(`${field}.sha256`, "disagrees with the digest in source");
    if (o.sizeBytes !== undefined) throw invalidArgument(`${field}.sizeBytes`, "not for an image (the manifest gives each layer's size)");
    return { source: o.source, sha256, sizeBytes: undefined };
  }
  // A tarball is an artifact like a model file: the same checks, the same field names.
  let a: ArtifactSpec | undefined;
  try {
    [a] = checkArtifacts(field, [{ source: o.source, sha256: o.sha256, sizeBytes: o.sizeBytes, path: "bundle.tar" }]);
  } catch (err) {
    const e = WardenError.from(err);
    throw new WardenError(e.code, e.rawMessage.replace(`${field}[0]`, field), { cause: err });
  }
  if (a === undefined) throw invalidArgument(field, "required");
  return { source: a.source, sha256: a.sha256, sizeBytes: a.sizeBytes };
}
