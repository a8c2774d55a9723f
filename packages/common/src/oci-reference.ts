import { invalidArgument } from "./errors.js";

/**
 * An OCI registry reference as an artifact or bundle source:
 * `oci://host[:port]/repository[:tag][@sha256:<hex>]` (HTTPS), or
 * `oci+http://…` for a registry that serves plain HTTP (a registry on the
 * same host or a lab network). A digest pins the manifest; a tag alone is
 * resolved at pull time.
 */
export interface OciReference {
  /** "https:" or "http:". */
  readonly protocol: "https:" | "http:";
  /** host[:port] */
  readonly host: string;
  readonly repository: string;
  readonly tag: string | undefined;
  /** 64 lowercase hex (the manifest's sha256), or undefined. */
  readonly digest: string | undefined;
}

/** Longest repository name (the distribution spec's practical limit). */
export const maxOciRepositoryChars = 255;

const repoPattern = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$/;
const tagPattern = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;
const hostPattern = /^[A-Za-z0-9.-]{1,253}(?::\d{1,5})?$|^\[[0-9A-Fa-f:.]{2,45}\](?::\d{1,5})?$/;

/** Whether a source names an OCI registry (and so is parsed by {@link parseOciReference}). */
export function isOciSource(source: string): boolean {
  return source.startsWith("oci://") || source.startsWith("oci+http://");
}

/** Parses an `oci://` source; INVALID_ARGUMENT naming `field` when it is not one. */
export function parseOciReference(field: string, source: string): OciReference {
  const http = source.startsWith("oci+http://");
  if (!http && !source.startsWith("oci://")) throw invalidArgument(field, `must start with oci:// or oci+http://, got ${JSON.stringify(source.slice(0, 64))}`);
  const rest = source.slice(http ? "oci+http://".length : "oci://".length);
  const slash = rest.indexOf("/");
  if (slash <= 0) throw invalidArgument(field, "must be oci://host[:port]/repository[:tag][@sha256:<hex>]");
  const host = rest.slice(0, slash);
  if (!hostPattern.test(host)) throw invalidArgument(field, `invalid registry host ${JSON.stringify(host.slice(0, 64))}`);
  let path = rest.slice(slash + 1);
  let digest: string | undefined;
  const at = path.indexOf("@");
  if (at >= 0) {
    const d = path.slice(at + 1);
    if (!/^sha256:[0-9a-f]{64}$/.test(d)) throw invalidArgument(field, `the digest must be sha256:<64 lowercase hex>, got ${JSON.stringify(d.slice(0, 80))}`);
    digest = d.slice("sha256:".length);
    path = path.slice(0, at);
  }
  let tag: string | undefined;
  const colon = path.lastIndexOf(":");
  if (colon >= 0) {
    tag = path.slice(colon + 1);
    path = path.slice(0, colon);
    if (!tagPattern.test(tag)) throw invalidArgument(field, `invalid tag ${JSON.stringify(tag.slice(0, 64))} (letters, digits, "_", "." and "-", at most 128)`);
  }
  if (path.length > maxOciRepositoryChars || !repoPattern.test(path)) throw invalidArgument(field, `invalid repository ${JSON.stringify(path.slice(0, 64))} (lowercase path components of letters and digits separated by ".", "_", "-" or "/", at most ${String(maxOciRepositoryChars)} characters)`);
  return { protocol: http ? "http:" : "https:", host, repository: path, tag, digest };
}
