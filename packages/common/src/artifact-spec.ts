import { invalidArgument } from "./errors.js";
import { isOciSource, parseOciReference } from "./oci-reference.js";

/**
 * One file of a model, named by its content: where to get it, what it must
 * hash to, how big it is, and the relative name a model's `modelFile` uses
 * for it. The same shape in the coordinator's model config and in
 * StartBackendRequest.artifacts; both check it with {@link checkArtifacts}.
 */
export interface ArtifactSpec {
  /**
   * "https://…", "http://…", "store:<relative path>" (the coordinator's
   * artifact store) or "oci://host/repository[:tag][@sha256:…]" (a registry
   * blob whose digest is `sha256`; oci-reference.ts).
   */
  readonly source: string;
  /** 64 lowercase hex characters. */
  readonly sha256: string;
  readonly sizeBytes: number;
  /** Relative, at most {@link maxArtifactPathChars} characters, no ".." segment. */
  readonly path: string;
}

/** Artifacts one model may list. */
export const maxArtifactsPerModel = 16;
/** Longest `source` (a URL, or "store:" and a path). */
export const maxArtifactSourceChars = 2048;
/** Longest `path`, and longest store path after "store:". */
export const maxArtifactPathChars = 256;
/** Largest `sizeBytes`: 1 TiB. */
export const maxArtifactBytes = 2 ** 40;

const hex64 = /^[0-9a-f]{64}$/;

/** True for 64 lowercase hex characters: a SHA-256 digest as Warden writes one (artifacts, bundles, peer tickets and keys). */
export function isHex64(s: string): boolean {
  return hex64.test(s);
}
// eslint-disable-next-line no-control-regex
const controlChars = /[\u0000-\u001f\u007f]/;

/** A relative path that stays where it is put: no leading "/", no "." or ".." or empty segment, no backslash, no control character. */
export function checkRelativePath(field: string, path: string, maxChars: number): string {
  if (path === "") throw invalidArgument(field, "required");
  if (path.length > maxChars) throw invalidArgument(field, `must be at most ${String(maxChars)} characters`);
  if (controlChars.test(path) || path.includes("\\")) throw invalidArgument(field, "must not contain control characters or a backslash");
  if (path.startsWith("/")) throw invalidArgument(field, `must be relative, got ${JSON.stringify(path.slice(0, 64))}`);
  for (const seg of path.split("/")) {
    if (seg === "" || seg === "." || seg === "..") throw invalidArgument(field, `must not contain an empty, "." or ".." segment, got ${JSON.stringify(path.slice(0, 64))}`);
  }
  return path;
}

/** The store path of a "store:<path>" source, or undefined for a URL. */
export function storePathOf(source: string): string | undefined {
  return source.startsWith("store:") ? source.slice("store:".length) : undefined;
}

function checkSource(field: string, source: string): void {
  if (source.length > maxArtifactSourceChars) throw invalidArgument(field, `must be at most ${String(maxArtifactSourceChars)} characters`);
  const store = storePathOf(source);
  if (store !== undefined) {
    checkRelativePath(field, store, maxArtifactPathChars);
    return;
  }
  if (isOciSource(source)) {
    parseOciReference(field, source);
    return;
  }
  let url: URL;
  try {
    url = new URL(source);
  } catch {
    throw invalidArgument(field, `must be an http(s) URL, "store:<relative path>" or "oci://host/repository[:tag][@sha256:<hex>]", got ${JSON.stringify(source.slice(0, 64))}`);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") throw invalidArgument(field, `must be an http(s) URL, "store:<relative path>" or "oci://host/repository[:tag][@sha256:<hex>]", got scheme ${JSON.stringify(url.protocol)}`);
  if (url.username !== "" || url.password !== "") throw invalidArgument(field, "must not carry credentials in the URL");
}

/**
 * Checks a whole artifact list (bounds above) and returns it normalised;
 * nothing is accepted in part. Errors name the field: `${field}[2].sha256`.
 */
export function checkArtifacts(field: string, input: unknown): ArtifactSpec[] {
  if (input === undefined) return [];
  if (!Array.isArray(input)) throw invalidArgument(field, "must be a list");
  if (input.length > maxArtifactsPerModel) throw invalidArgument(field, `at most ${String(maxArtifactsPerModel)} artifacts, got ${String(input.length)}`);
  const out: ArtifactSpec[] = [];
  const paths = new Set<string>();
  for (const [i, v] of (input as unknown[]).entries()) {
    const f = `${field}[${String(i)}]`;
    if (typeof v !== "object" || v === null || Array.isArray(v)) throw invalidArgument(f, "must be a map with source, sha256, sizeBytes and path");
    const o = v as Record<string, unknown>;
    for (const k of Object.keys(o)) if (!["source", "sha256", "sizeBytes", "path"].includes(k)) throw invalidArgument(`${f}.${k}`, "unknown field (allowed: source, sha256, sizeBytes, path)");
    const { source, sha256, sizeBytes, path } = o;
    if (typeof source !== "string") throw invalidArgument(`${f}.source`, source === undefined ? "required" : "must be a string");
    checkSource(`${f}.source`, source);
    if (typeof sha256 !== "string" || !hex64.test(sha256)) throw invalidArgument(`${f}.sha256`, "must be 64 lowercase hex characters (the file's SHA-256)");
    const size = typeof sizeBytes === "bigint" ? Number(sizeBytes) : sizeBytes;
    if (typeof size !== "number" || !Number.isSafeInteger(size) || size < 0 || size > maxArtifactBytes) throw invalidArgument(`${f}.sizeBytes`, `must be an integer in 0..${String(maxArtifactBytes)} (1 TiB)`);
    if (typeof path !== "string") throw invalidArgument(`${f}.path`, path === undefined ? "required" : "must be a string");
    checkRelativePath(`${f}.path`, path, maxArtifactPathChars);
    if (paths.has(path)) throw invalidArgument(`${f}.path`, `${JSON.stringify(path)} is listed twice`);
    paths.add(path);
    out.push({ source, sha256, sizeBytes: size, path });
  }
  return out;
}
