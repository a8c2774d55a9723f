import { createHash } from "node:crypto";
import { Code, WardenError, abortReason, type OciReference } from "@warden/common";
import type { RegistryLogin } from "./registry-auth.js";

/** Largest manifest or index body read (LocalAI's are a few KiB; Docker Hub's multi-arch indexes tens). */
export const maxManifestBytes = 4 * 1024 * 1024;
/** Most layers an image may have (LocalAI backend images have one to a few). */
export const maxManifestLayers = 128;
/** Most entries of an image index (one per platform). */
export const maxIndexEntries = 256;
/** Largest token-endpoint answer read. */
export const maxTokenBytes = 64 * 1024;

const manifestTypes = {
  ociManifest: "application/vnd.oci.image.manifest.v1+json",
  dockerManifest: "application/vnd.docker.distribution.manifest.v2+json",
  ociIndex: "application/vnd.oci.image.index.v1+json",
  dockerList: "application/vnd.docker.distribution.manifest.list.v2+json",
} as const;
const acceptManifests = Object.values(manifestTypes).join(", ");

/** A blob a manifest names: its media type, sha256 (hex, no "sha256:") and size. */
export interface OciDescriptor {
  readonly mediaType: string;
  readonly sha256: string;
  readonly sizeBytes: number;
}

/** An image manifest (OCI or Docker v2 schema 2), its own digest verified. */
export interface OciManifest {
  /** sha256 of the manifest's bytes, hex. */
  readonly sha256: string;
  readonly mediaType: string;
  readonly config: OciDescriptor;
  readonly layers: readonly OciDescriptor[];
}

/** What `fetch` failed with, for a message: the cause's errno code when there is one. */
function netCause(err: unknown): string {
  const cause = (err as { cause?: { code?: unknown; message?: unknown } }).cause;
  if (typeof cause?.code === "string") return cause.code;
  if (typeof cause?.message === "string") return cause.message;
  return err instanceof Error ? err.message : String(err);
}

/** Reads a body of at most `maxBytes`; a larger one is the registry's fault: UNAVAILABLE. */
async function boundedBody(res: Response, maxBytes: number, what: string): Promise<Buffer> {
  const declared = Number(res.headers.get("content-length") ?? "NaN");
  if (Number.isFinite(declared) && declared > maxBytes) {
    await res.body?.cancel();
    throw new WardenError(Code.Unavailable, `the registry's ${what} has ${String(declared)} bytes, more than the ${String(maxBytes)} allowed`);
  }
  const parts: Buffer[] = [];
  let n = 0;
  if (res.body === null) return Buffer.alloc(0);
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    n += chunk.byteLength;
    if (n > maxBytes) throw new WardenError(Code.Unavailable, `the registry's ${what} is larger than the ${String(maxBytes)} bytes allowed`);
    parts.push(Buffer.from(chunk));
  }
  return Buffer.concat(parts);
}

/** True for a `WWW-Authenticate: Basic realm="…"` challenge (docker-registry with htpasswd, Artifactory, Nexus). */
export function isBasicChallenge(header: string | null): boolean {
  return header !== null && /^basic(\s|$)/i.test(header);
}

/** The Authorization value of HTTP Basic for a login. */
export function basicAuthorization(login: RegistryLogin): string {
  return `Basic ${Buffer.from(`${login.username}:${login.password}`, "utf8").toString("base64")}`;
}

/** `Bearer realm="…",service="…",scope="…"` → its parameters; undefined for another scheme. */
export function parseBearerChallenge(header: string | null): Record<string, string> | undefined {
  if (header === null || !/^bearer\s/i.test(header)) return undefined;
  const out: Record<string, string> = {};
  for (const m of header.slice(6).matchAll(/([A-Za-z]+)="([^"]*)"/g)) out[(m[1] ?? "").toLowerCase()] = m[2] ?? "";
  return out;
}

function descriptor(v: unknown, field: string): OciDescriptor {
  const o = v as { mediaType?: unknown; digest?: unknown; size?: unknown } | null;
  const digest = typeof o?.digest === "string" ? o.digest : "";
  if (!/^sha256:[0-9a-f]{64}$/.test(digest)) throw new WardenError(Code.Unavailable, `the manifest's ${field}.digest is not sha256:<hex> (${JSON.stringify(digest.slice(0, 80))})`);
  const size = o?.size;
  if (typeof size !== "number" || !Number.isSafeInteger(size) || size < 0) throw new WardenError(Code.Unavailable, `the manifest's ${field}.size is not a byte count`);
  return { mediaType: typeof o?.mediaType === "string" ? o.mediaType.slice(0, 256) : "", sha256: digest.slice("sha256:".length), sizeBytes: size };
}

/** The platform an image index entry is picked for: this process's (an agent runs its backends on its own machine). */
function wantedPlatform(): { os: string; architecture: string } {
  const arch: Record<string, string> = { x64: "amd64", arm64: "arm64", arm: "arm", ppc64: "ppc64le", s390x: "s390x" };
  return { os: "linux", architecture: arch[process.arch] ?? process.arch };
}

/**
 * A client for one repository of an OCI distribution registry (the HTTP API
 * every registry speaks: Docker Hub, GHCR, quay.io, Harbor, `docker-registry`),
 * on node's fetch. Anonymous unless given a login (registry-auth.ts), and
 * authenticated the way the registry asks on a 401: `WWW-Authenticate:
 * Bearer realm=…` is answered by fetching a pull token from the realm (over
 * https when the registry is https), sending the login there with HTTP Basic
 * when there is one; `WWW-Authenticate: Basic` by sending the login to the
 * registry itself. The request is retried once; what was earned is sent on
 * the client's later requests. Every failure is a WardenError: NOT_FOUND (no
 * such manifest or blob), DATA_LOSS (bytes that are not the digest asked
 * for), UNAUTHENTICATED (credentials needed and none held, or refused),
 * PERMISSION_DENIED (an HTTP 403: the user may not pull this repository),
 * UNAVAILABLE (the registry unreachable or answering anything else).
 */
export class OciRegistryClient {
  /** The Authorization value the last challenge earned (Bearer token or Basic login). */
  private authorization: string | undefined;
  private readonly base: string;

  constructor(
    private readonly ref: Pick<OciReference, "protocol" | "host" | "repository">,
    private readonly login?: RegistryLogin,
  ) {
    this.base = `${ref.protocol}//${ref.host}/v2/${ref.repository}`;
  }

  /** Where the registry lives, for messages. */
  describe(): string {
    return `${this.ref.protocol === "http:" ? "oci+http" : "oci"}://${this.ref.host}/${this.ref.repository}`;
  }

  /** A GET of `path` under the repository, authenticated when the registry asks. */
  async get(path: string, headers: Record<string, string>, signal: AbortSignal): Promise<Response> {
    for (let attempt = 0; ; attempt++) {
      const res = await this.send(`${this.base}/${path}`, { ...headers, ...(this.authorization === undefined ? {} : { authorization: this.authorization }) }, signal);
      // Only the registry's own answer is a challenge or a refusal; a blob store it redirected to is judged as any source.
      if ((res.status !== 401 && res.status !== 403) || res.redirected) return res;
      await res.body?.cancel();
      if (res.status === 403) throw this.refused("HTTP 403");
      // A second 401: the token or login just earned does not open this repository.
      if (attempt > 0) throw this.unauthenticated("HTTP 401");
      const header = res.headers.get("www-authenticate");
      const challenge = parseBearerChallenge(header);
      if (challenge !== undefined) {
        this.authorization = `Bearer ${await this.fetchToken(challenge, signal)}`;
      } else if (isBasicChallenge(header)) {
        if (this.login === undefined) throw this.unauthenticated("HTTP 401, Basic challenge");
        this.authorization = basicAuthorization(this.login);
      } else {
        throw new WardenError(Code.Unavailable, `the registry ${this.ref.host} answered HTTP 401 with neither a Bearer nor a Basic challenge`);
      }
    }
  }

  /** UNAUTHENTICATED naming the registry: no login held for it, or the one held refused. */
  private unauthenticated(answer: string): WardenError {
    const why = this.login === undefined
      ? `asks for credentials (${answer}) and registryAuthFile holds none for ${this.ref.host}`
      : `refused the credentials registryAuthFile holds for ${this.ref.host} (user ${JSON.stringify(this.login.username)}; ${answer})`;
    return new WardenError(Code.Unauthenticated, `the registry ${this.ref.host} ${why}`);
  }

  /** PERMISSION_DENIED naming the registry and repository. */
  private refused(answer: string): WardenError {
    const who = this.login === undefined ? "an anonymous pull" : `the user ${JSON.stringify(this.login.username)}`;
    return new WardenError(Code.PermissionDenied, `the registry ${this.ref.host} denies ${who} access to ${this.ref.repository} (${answer})`);
  }

  private async send(url: string, headers: Record<string, string>, signal: AbortSignal): Promise<Response> {
    let res: Response;
    try {
      res = await fetch(url, { headers: { "user-agent": "warden-agent", ...headers }, signal, redirect: "follow" });
    } catch (err) {
      if (signal.aborted) throw abortReason(signal);
      throw new WardenError(Code.Unavailable, `cannot reach the registry ${this.ref.host}: ${netCause(err)}`);
    }
    if (res.redirected && this.ref.protocol === "https:" && !res.url.startsWith("https:")) {
      await res.body?.cancel();
      throw new WardenError(Code.Unavailable, "the registry redirected from https to plain http; refused");
    }
    return res;
  }

  private async fetchToken(c: Record<string, string>, signal: AbortSignal): Promise<string> {
    const realm = c.realm ?? "";
    let url: URL;
    try {
      url = new URL(realm);
    } catch {
      throw new WardenError(Code.Unavailable, `the registry's token realm ${JSON.stringify(realm.slice(0, 128))} is not a URL`);
    }
    if (this.ref.protocol === "https:" && url.protocol !== "https:") throw new WardenError(Code.Unavailable, "the registry's token realm is not https; refused");
    if (c.service !== undefined) url.searchParams.set("service", c.service);
    url.searchParams.set("scope", c.scope ?? `repository:${this.ref.repository}:pull`);
    // The registry's login goes to the realm it names, as docker and skopeo send it; never over http from an https registry (above).
    const res = await this.send(url.toString(), this.login === undefined ? {} : { authorization: basicAuthorization(this.login) }, signal);
    if (res.status !== 200) {
      await res.body?.cancel();
      if (res.status === 401) throw this.unauthenticated("its token endpoint answered HTTP 401");
      if (res.status === 403) throw this.refused("its token endpoint answered HTTP 403");
      throw new WardenError(Code.Unavailable, `the registry's token endpoint answered HTTP ${String(res.status)}`);
    }
    const body = await boundedBody(res, maxTokenBytes, "token answer");
    let parsed: { token?: unknown; access_token?: unknown };
    try {
      parsed = JSON.parse(body.toString("utf8")) as typeof parsed;
    } catch {
      throw new WardenError(Code.Unavailable, "the registry's token endpoint sent no JSON");
    }
    const token = typeof parsed.token === "string" ? parsed.token : parsed.access_token;
    if (typeof token !== "string" || token === "") throw new WardenError(Code.Unavailable, "the registry's token answer holds no token");
    return token;
  }

  /**
   * The image manifest `reference` (a tag or "sha256:<hex>") names. Its bytes
   * are hashed: asked by digest they must hash to it (DATA_LOSS otherwise).
   * An image index (multi-platform) is followed once, to the linux entry of
   * this machine's architecture. Bounds: {@link maxManifestBytes},
   * {@link maxManifestLayers}, {@link maxIndexEntries}.
   */
  async manifest(reference: string, signal: AbortSignal, depth = 0): Promise<OciManifest> {
    const res = await this.get(`manifests/${reference}`, { accept: acceptManifests }, signal);
    if (res.status === 404) {
      await res.body?.cancel();
      throw new WardenError(Code.NotFound, `${this.describe()} has no manifest ${JSON.stringify(reference)} (HTTP 404: unknown tag or digest)`);
    }
    if (res.status !== 200) {
      await res.body?.cancel();
      throw new WardenError(Code.Unavailable, `the registry answered HTTP ${String(res.status)} for manifest ${JSON.stringify(reference)}`);
    }
    const body = await boundedBody(res, maxManifestBytes, "manifest");
    const sha256 = createHash("sha256").update(body).digest("hex");
    if (reference.startsWith("sha256:") && sha256 !== reference.slice("sha256:".length)) {
      throw new WardenError(Code.DataLoss, `the manifest asked for as ${reference} hashes to sha256:${sha256}`);
    }
    let doc: { mediaType?: unknown; schemaVersion?: unknown; config?: unknown; layers?: unknown; manifests?: unknown };
    try {
      doc = JSON.parse(body.toString("utf8")) as typeof doc;
    } catch {
      throw new WardenError(Code.Unavailable, `the manifest ${JSON.stringify(reference)} is not JSON`);
    }
    const mediaType = typeof doc.mediaType === "string" ? doc.mediaType : (res.headers.get("content-type") ?? "").split(";")[0]?.trim() ?? "";
    if (mediaType === manifestTypes.ociIndex || mediaType === manifestTypes.dockerList || (mediaType === "" && Array.isArray(doc.manifests))) {
      if (depth > 0) throw new WardenError(Code.Unavailable, "an image index names another index; refused");
      const entries = Array.isArray(doc.manifests) ? (doc.manifests as unknown[]) : [];
      if (entries.length > maxIndexEntries) throw new WardenError(Code.Unavailable, `the image index lists ${String(entries.length)} manifests, more than ${String(maxIndexEntries)}`);
      const want = wantedPlatform();
      const pick = entries.find((e) => {
        const p = (e as { platform?: { os?: unknown; architecture?: unknown } }).platform;
        return p?.os === want.os && p.architecture === want.architecture;
      });
      if (pick === undefined) throw new WardenError(Code.NotFound, `the image index ${JSON.stringify(reference)} has no ${want.os}/${want.architecture} image`);
      return this.manifest(`sha256:${descriptor(pick, "manifests[]").sha256}`, signal, depth + 1);
    }
    if (mediaType !== manifestTypes.ociManifest && mediaType !== manifestTypes.dockerManifest && !(mediaType === "" && doc.schemaVersion === 2)) {
      throw new WardenError(Code.Unavailable, `the manifest ${JSON.stringify(reference)} has media type ${JSON.stringify(mediaType.slice(0, 128))}; expected an OCI or Docker v2 schema 2 image manifest`);
    }
    const layersIn = Array.isArray(doc.layers) ? (doc.layers as unknown[]) : [];
    if (layersIn.length > maxManifestLayers) throw new WardenError(Code.Unavailable, `the image has ${String(layersIn.length)} layers, more than ${String(maxManifestLayers)}`);
    return { sha256, mediaType, config: descriptor(doc.config, "config"), layers: layersIn.map((l, i) => descriptor(l, `layers[${String(i)}]`)) };
  }

  /** GET of a blob by digest, from `offset` (a Range request when > 0). The caller judges the status (artifact-plan.ts judgeHttpAnswer). */
  async blob(sha256: string, offset: number, signal: AbortSignal): Promise<Response> {
    return this.get(`blobs/sha256:${sha256}`, { "accept-encoding": "identity", ...(offset > 0 ? { range: `bytes=${String(offset)}-` } : {}) }, signal);
  }
}
