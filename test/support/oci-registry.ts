/**
 * Real parts for OCI tests: Debian's `docker-registry` (distribution 2.x) on a
 * free port with a private storage directory (optionally demanding a user and
 * password: its htpasswd auth, bcrypt entries written by apache2-utils'
 * `htpasswd -B`), images pushed into it by `skopeo copy` from an OCI layout
 * directory built here, and a ustar writer that builds the layers (including
 * hostile ones no tar tool would write).
 */
import { spawn, execFile, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { gunzipSync, gzipSync } from "node:zlib";
import { testPortRange } from "./port-range.js";

const run = promisify(execFile);

export const sha256Of = (b: Buffer | string): string => createHash("sha256").update(b).digest("hex");

/** One tar entry; `type` as ustar's typeflag: "0" file, "5" dir, "2" symlink, "1" hard link, "3" char device. */
export interface TarEntry {
  readonly name: string;
  readonly type?: "0" | "5" | "2" | "1" | "3";
  readonly body?: Buffer | string;
  readonly mode?: number;
  readonly link?: string;
  /** A size to write in the header other than the body's (a lying header). */
  readonly sizeOverride?: number;
}

function header(e: TarEntry, size: number): Buffer {
  const h = Buffer.alloc(512);
  const put = (s: string, at: number, len: number): void => void h.write(s.slice(0, len), at, "utf8");
  const oct = (n: number, at: number, len: number): void => { put(`${n.toString(8).padStart(len - 1, "0")}\0`, at, len); };
  put(e.name, 0, 100);
  oct(e.mode ?? (e.type === "5" ? 0o755 : 0o644), 100, 8);
  oct(0, 108, 8);
  oct(0, 116, 8);
  oct(size, 124, 12);
  oct(0, 136, 12);
  h.write("        ", 148, "latin1");
  h.write(e.type ?? "0", 156, "latin1");
  put(e.link ?? "", 157, 100);
  h.write("ustar\0", 257, "latin1");
  h.write("00", 263, "latin1");
  let sum = 0;
  for (const b of h) sum += b;
  put(`${sum.toString(8).padStart(6, "0")}\0 `, 148, 8);
  return h;
}

/** A ustar archive of `entries`, gzipped unless `gzip` is false. */
export function tarOf(entries: readonly TarEntry[], gzip = true): Buffer {
  const parts: Buffer[] = [];
  for (const e of entries) {
    const body = Buffer.from(e.body ?? "");
    parts.push(header(e, e.sizeOverride ?? body.length), body, Buffer.alloc((512 - (body.length % 512)) % 512));
  }
  parts.push(Buffer.alloc(1024));
  const tar = Buffer.concat(parts);
  return gzip ? gzipSync(tar) : tar;
}

export interface Registry {
  /** host:port */
  readonly host: string;
  readonly storage: string;
  stop(): Promise<void>;
  /** Stops it and starts it again on the same port and storage. */
  restart(): Promise<void>;
}

async function untilUp(host: string, child: ChildProcess): Promise<void> {
  for (let i = 0; i < 400; i++) {
    if (child.exitCode !== null) throw new Error(`docker-registry exited with ${String(child.exitCode)}`);
    // 401: up, and asking for the htpasswd login.
    const ok = await fetch(`http://${host}/v2/`).then((r) => r.status === 200 || r.status === 401, () => false);
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`docker-registry on ${host} did not come up`);
}

/** An htpasswd file at `path` with one bcrypt entry, written by `htpasswd -B` (apt: apache2-utils). */
export async function writeHtpasswd(path: string, user: string, password: string): Promise<void> {
  await run("/usr/bin/htpasswd", ["-B", "-b", "-c", path, user, password], { timeout: 30_000 });
}

/**
 * `docker-registry serve` on a port of this worker's range, storing under
 * `dir`. With `htpasswd` (a file from {@link writeHtpasswd}) every request
 * needs its user and password: a 401 with `WWW-Authenticate: Basic` otherwise.
 */
export async function startRegistry(dir: string, opts: { readonly htpasswd?: string } = {}): Promise<Registry> {
  const port = testPortRange(1).min;
  const host = `127.0.0.1:${String(port)}`;
  const storage = join(dir, "registry");
  await mkdir(storage, { recursive: true });
  const config = join(dir, "registry.yml");
  await writeFile(config, `version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: ${storage}\n  delete:\n    enabled: true\nhttp:\n  addr: ${host}\nlog:\n  level: error\n${opts.htpasswd === undefined ? "" : `auth:\n  htpasswd:\n    realm: warden-test\n    path: ${opts.htpasswd}\n`}`);
  let child: ChildProcess;
  const up = async (): Promise<void> => {
    // Its log goes nowhere: every 404 a test provokes on purpose is an error line there.
    child = spawn("/usr/bin/docker-registry", ["serve", config], { stdio: "ignore" });
    await untilUp(host, child);
  };
  const down = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGKILL");
    await exited;
  };
  await up();
  return { host, storage, stop: down, restart: async () => { await down(); await up(); } };
}

export interface BuiltImage {
  /** sha256 of the manifest (what `@sha256:` pins). */
  readonly manifest: string;
  readonly layers: readonly { sha256: string; size: number; bytes: Buffer }[];
}

/**
 * Writes an OCI image layout at `dir` holding one image of `layers` (each a
 * tar or tar+gzip archive) tagged `tag`, and pushes it with `skopeo copy` to
 * `registry/repo:tag`. skopeo keeps the manifest's bytes, so the digest
 * computed here is the one the registry serves. `creds` ("user:password") logs in to a registry that wants it.
 */
export async function pushImage(dir: string, registry: string, repo: string, tag: string, layers: readonly Buffer[], creds?: string): Promise<BuiltImage> {
  const blobs = join(dir, "blobs", "sha256");
  await mkdir(blobs, { recursive: true });
  const put = async (b: Buffer | string): Promise<{ sha256: string; size: number }> => {
    const sha256 = sha256Of(b);
    await writeFile(join(blobs, sha256), b);
    return { sha256, size: Buffer.byteLength(b) };
  };
  const described = [];
  for (const l of layers) described.push({ ...(await put(l)), bytes: l });
  const config = await put(JSON.stringify({ architecture: "amd64", os: "linux", rootfs: { type: "layers", diff_ids: layers.map((l) => `sha256:${sha256Of(l[0] === 0x1f ? gunzipSync(l) : l)}`) }, config: {} }));
  const manifestText = JSON.stringify({
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: { mediaType: "application/vnd.oci.image.config.v1+json", digest: `sha256:${config.sha256}`, size: config.size },
    layers: described.map((l, i) => ({ mediaType: layers[i]?.[0] === 0x1f ? "application/vnd.oci.image.layer.v1.tar+gzip" : "application/vnd.oci.image.layer.v1.tar", digest: `sha256:${l.sha256}`, size: l.size })),
  });
  const manifest = await put(manifestText);
  await writeFile(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  await writeFile(join(dir, "index.json"), JSON.stringify({ schemaVersion: 2, manifests: [{ mediaType: "application/vnd.oci.image.manifest.v1+json", digest: `sha256:${manifest.sha256}`, size: manifest.size, annotations: { "org.opencontainers.image.ref.name": tag } }] }));
  await run("/usr/bin/skopeo", ["copy", "--quiet", "--insecure-policy", "--preserve-digests", "--dest-tls-verify=false", ...(creds === undefined ? [] : ["--dest-creds", creds]), `oci:${dir}:${tag}`, `docker://${registry}/${repo}:${tag}`], { timeout: 120_000 });
  return { manifest: manifest.sha256, layers: described.map((l) => ({ sha256: l.sha256, size: l.size, bytes: l.bytes })) };
}
