import { chmod, lstat, mkdir, open, readdir, rename, rm, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import { Code, WardenError, isHex64, isOciSource, parseOciReference, type ArtifactSpec, type Logger } from "@warden/common";
import type { ArtifactCache, PullPurpose } from "./artifact-cache.js";
import { cachePaths, type PullProgress } from "./artifact-pull.js";
import { bundleDir, type BundleSpec } from "./backend-bundle-config.js";
import { OciRegistryClient } from "./oci-registry.js";
import type { RegistryLoginLookup } from "./registry-auth.js";
import { noPeers, type PeerFinder, type PeerLease } from "./peer-finder.js";
import { SingleFlight } from "./single-flight.js";
import { diskUsage } from "./disk-usage.js";
import { extractLayer, tarNoRoomReason, unsafeBundleReason, type TarLimits, type TarTally } from "./tar-extract.js";

/** Unpacked size of one bundle: LocalAI's CUDA backends are a few GiB. */
export const maxBundleBytes = 32 * 2 ** 30;
/** Entries of one bundle (a Python backend with its virtualenv has tens of thousands). */
export const maxBundleEntries = 500_000;
const limits: TarLimits = { maxTotalBytes: maxBundleBytes, maxEntries: maxBundleEntries };

/**
 * An install's progress: a layer's (or the tarball's) bytes as the cache
 * reports them, or a stage without bytes — `resolving` while the image's
 * manifest is read, `pulling` while its layers are fetched (their bytes
 * follow as the cache's reports), `unpacking` while the layers are extracted, `installed`
 * once the bundle is in place (StartBackend's `stage` events).
 */
export type BundleProgress = PullProgress | { readonly stage: BundleStage };

/** Where an install is: its image's manifest read, its layers (or tarball) fetched, extracted, in place. */
export type BundleStage = "resolving" | "pulling" | "unpacking" | "installed";

/** One installed bundle, as `backends ls` shows it. */
export interface InstalledBundle {
  readonly sha256: string;
  readonly dir: string;
}

/** Who asks for an install: a start of a model (before launching its backend), or an operator's InstallBundle. */
export type InstallCause = { readonly t: "start"; readonly backend: string; readonly model: string; readonly incarnation: string } | { readonly t: "operator"; readonly backend: string };

/** A bundle a start installed (BundleInstall on the heartbeat; the coordinator audits it as backend.installed). */
export interface StartInstallRecord {
  readonly backend: string;
  readonly sha256: string;
  readonly source: string;
  readonly model: string;
  readonly incarnation: string;
}

export interface BundleInstallerOptions {
  readonly modelsPath: string;
  /** Pulls the layers or tarball (verified, resumable, one pull per digest). */
  readonly cache: ArtifactCache;
  readonly logger: Logger;
  /**
   * Told of each install a start's ensure() did (the heartbeat reports it). An
   * operator's install is not: the coordinator audits it from InstallBundle's answer.
   */
  readonly onStartInstalled?: (r: StartInstallRecord) => void;
  /** Credentials of private OCI registries (registryAuthFile) for the image's manifest; its layers are pulled through `cache`, which has its own. @default anonymous */
  readonly registryLogin?: RegistryLoginLookup;
  /** Peers for the layers or tarball (the coordinator's FindPeers, peer-finder.ts); undefined = from the origin only. */
  readonly findPeers?: PeerFinder;
}

/**
 * Installs backend bundles into `<modelsPath>/.warden-cache/backends/<sha256>`:
 * the tarball or each image layer is pulled through the artifact cache (so
 * verified by digest and resumable), then unpacked in order into a staging
 * directory (tar-extract.ts: no path or symlink escape, bounded, also by the
 * room the cache's disk budget can make), which must hold a regular file
 * `run.sh`; room is made for its size on disk (install below), and only then
 * is it renamed into place. A final directory therefore always holds a
 * complete, verified bundle, and the cache is within its budget once it is
 * there. One install per digest however many starts ask at once. The layers
 * or tarball the cache lacks are fetched from peers the coordinator names
 * (`findPeers`) first, as a start's model files are, the origin after.
 */
export class BundleInstaller {
  private readonly flights = new SingleFlight<{ dir: string; fresh: boolean }, BundleProgress>();
  /** Starts using a digest (from before its install until its process is in the table). */
  private readonly uses = new Map<string, number>();
  /** Digests being removed: a start asking for one fails instead of racing the removal. */
  private readonly removing = new Set<string>();
  /** Digests the cache is evicting: a start asking for one waits, then installs it again. */
  private readonly evicting = new Map<string, Promise<void>>();
  private readonly log: Logger;

  constructor(private readonly o: BundleInstallerOptions) {
    this.log = o.logger.child({ component: "bundles" });
    // Installed bundles count against the cache's disk budget and are evicted with its files (artifact-cache-index.ts).
    o.cache.index.attachBundles({ inUse: () => this.uses.keys(), evict: (sha256) => this.evict(sha256) });
  }

  /** The installed directory (installing it first when missing). Errors name the bundle; codes as artifact pulls' (DATA_LOSS, NOT_FOUND, UNAVAILABLE, RESOURCE_EXHAUSTED), FAILED_PRECONDITION for an unsafe or incomplete bundle. */
  async ensure(spec: BundleSpec, signal: AbortSignal, onProgress: (p: BundleProgress) => void = () => {}, cause?: InstallCause): Promise<string> {
    return (await this.ensureInstalled(spec, signal, onProgress, cause)).dir;
  }

  /**
   * As ensure(), and whether this very call installed it (`installedHere`):
   * false when it was installed already, or when another caller's install
   * (a start's, say) was under way and this call waited for it. Exactly one
   * caller per install sees true, so it is audited once.
   */
  async ensureInstalled(spec: BundleSpec, signal: AbortSignal, onProgress: (p: BundleProgress) => void = () => {}, cause?: InstallCause): Promise<{ dir: string; installedHere: boolean }> {
    const dir = bundleDir(this.o.modelsPath, spec.sha256);
    if (this.removing.has(spec.sha256)) throw new WardenError(Code.Unavailable, `backend bundle ${spec.source.slice(0, 256)} (sha256 ${spec.sha256}): it is being removed; retry once RemoveBundle finished`);
    await this.evicting.get(spec.sha256);
    if (await isInstalled(dir)) {
      // After the index's first scan, or the use would be lost to the scan's mtime.
      await this.o.cache.index.ready();
      this.o.cache.index.touch(spec.sha256, "bundle");
      return { dir, installedHere: false };
    }
    // Set by the flight's work, which runs only for the caller that began it.
    const ran = { here: false };
    try {
      const out = await this.flights.run(
        spec.sha256,
        signal,
        (s, report) => {
          ran.here = true;
          return this.install(spec, dir, s, report, cause);
        },
        onProgress,
      );
      this.o.cache.index.touch(spec.sha256, "bundle");
      return { dir: out.dir, installedHere: ran.here && out.fresh };
    } catch (err) {
      const e = WardenError.from(err);
      throw new WardenError(e.code, `backend bundle ${spec.source.slice(0, 256)} (sha256 ${spec.sha256}): ${e.rawMessage}`, { cause: err, details: { field: "bundle", ...(e.details.reason === unsafeBundleReason ? { reason: unsafeBundleReason } : {}) } });
    }
  }

  /** Installed bundles (directories named by a digest). */
  async list(): Promise<InstalledBundle[]> {
    const root = dirname(bundleDir(this.o.modelsPath, "x"));
    const names = await readdir(root).catch(() => [] as string[]);
    return names.filter((n) => isHex64(n)).map((sha256) => ({ sha256, dir: join(root, sha256) }));
  }

  /** Marks `sha256` in use by a start; remove() refuses until the returned release is called. */
  use(sha256: string): () => void {
    this.uses.set(sha256, (this.uses.get(sha256) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const n = (this.uses.get(sha256) ?? 1) - 1;
      if (n === 0) this.uses.delete(sha256);
      else this.uses.set(sha256, n);
    };
  }

  /**
   * Removes an installed bundle; false when it was not installed.
   * FAILED_PRECONDITION while a start uses it or `busy` names a live process
   * of it. The check and the mark that makes later starts fail are one
   * synchronous step, so no start slips in between.
   */
  async remove(sha256: string, busy: () => string | undefined): Promise<boolean> {
    const dir = bundleDir(this.o.modelsPath, sha256);
    if (!(await isInstalled(dir))) return false;
    const why = (this.uses.get(sha256) ?? 0) > 0 ? "a start is installing or launching it" : busy();
    if (why !== undefined) throw new WardenError(Code.FailedPrecondition, `backend bundle sha256 ${sha256} is in use: ${why}`);
    if (this.removing.has(sha256) || this.evicting.has(sha256)) return false;
    this.removing.add(sha256);
    try {
      await this.renameAway(sha256);
    } finally {
      this.removing.delete(sha256);
    }
    this.o.cache.index.forgetBundle(sha256);
    this.log.info("backend bundle removed", { sha256 });
    return true;
  }

  /** The cache's eviction of an unused bundle: marked synchronously (a start asking now waits for it), then removed. */
  private evict(sha256: string): Promise<void> {
    // RemoveBundle is removing it already: that removal is this eviction's.
    if (this.removing.has(sha256)) return Promise.resolve();
    const p = this.renameAway(sha256).finally(() => this.evicting.delete(sha256));
    this.evicting.set(
      sha256,
      p.catch(() => {}),
    );
    return p;
  }

  /** Renamed away first, then deleted: nothing ever sees a half-removed bundle under its final name. */
  private async renameAway(sha256: string): Promise<void> {
    const dir = bundleDir(this.o.modelsPath, sha256);
    const gone = join(dirname(dir), `.removing-${sha256}`);
    await rm(gone, { recursive: true, force: true });
    await rename(dir, gone).catch((err: unknown) => {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    });
    await rm(gone, { recursive: true, force: true });
  }

  /** Whether the digest's bundle is installed. */
  installed(sha256: string): Promise<boolean> {
    return isInstalled(bundleDir(this.o.modelsPath, sha256));
  }

  /**
   * Pulls, unpacks and installs one bundle within the cache's disk budget:
   *
   * 1. The bundle's own layers (or tarball) are held from before their pulls
   *    to the end of the install, so no eviction (for this install or any
   *    other pull) takes a layer the unpacking still has to read.
   * 2. Before unpacking, the unpacking is bounded by the room the cache can
   *    make (room now + every entry no backend uses, its own layers not
   *    counted): a bundle that cannot fit stops at the first file past it,
   *    RESOURCE_EXHAUSTED, nothing evicted, the staging directory removed.
   * 3. Unpacked, the staging directory's size on disk is measured and room
   *    made for it as for a pull (least recently used first, never a file or
   *    bundle in use, its layers or itself), all before the rename: once the
   *    bundle is in place the cache is within its budget again. When even
   *    that cannot make room (the bound counts file sizes; disk blocks can
   *    take more), nothing is evicted and the staging directory goes.
   */
  private async install(spec: BundleSpec, dir: string, signal: AbortSignal, report: (p: BundleProgress) => void, cause: InstallCause | undefined): Promise<{ dir: string; fresh: boolean }> {
    if (await isInstalled(dir)) return { dir, fresh: false };
    // The layers' pulls are audited as the bundle's (artifact.pulled with its backend, bundle_layer).
    const purpose: PullPurpose = { backend: cause?.backend ?? "", bundleLayer: true, ...(cause?.t === "start" ? { model: cause.model } : {}) };
    const index = this.o.cache.index;
    const holdKey = `bundle-install:${spec.sha256}`;
    try {
      const oci = isOciSource(spec.source);
      if (oci) report({ stage: "resolving" });
      const artifacts = oci ? await this.imageLayers(spec, signal) : [tarballArtifact(spec)];
      // Before the first pull: pulling a later layer must not evict an earlier one.
      index.hold(holdKey, artifacts.map((a) => a.sha256));
      report({ stage: "pulling" });
      const files = await this.pull(artifacts, signal, report, purpose);
      report({ stage: "unpacking" });
      const out = await this.unpack(spec, dir, files, signal, cause);
      report({ stage: "installed" });
      return { dir: out, fresh: true };
    } finally {
      index.release(holdKey);
    }
  }

  /** Each artifact through the cache, in order, from the peers the coordinator names (findPeers) first; their slots held until the last pull ended. */
  private async pull(artifacts: readonly ArtifactSpec[], signal: AbortSignal, report: (p: PullProgress) => void, purpose: PullPurpose): Promise<string[]> {
    const lease = await this.peersFor(artifacts, signal);
    const files: string[] = [];
    try {
      for (const a of artifacts) files.push(await this.o.cache.ensure(a, signal, report, lease.peers.get(a.sha256) ?? [], purpose));
    } finally {
      lease.release();
    }
    return files;
  }

  private async unpack(spec: BundleSpec, dir: string, files: readonly string[], signal: AbortSignal, cause: InstallCause | undefined): Promise<string> {
    const index = this.o.cache.index;
    const room = await index.roomToMake();
    const staging = join(dirname(dir), `.partial-${spec.sha256}`);
    await rm(staging, { recursive: true, force: true });
    await mkdir(staging, { recursive: true, mode: 0o755 });
    const tally: TarTally = { bytes: 0, entries: 0 };
    try {
      for (const f of files) await extractLayer(f, staging, { ...limits, roomBytes: room.bytes }, tally, signal);
      const run = await lstat(join(staging, "run.sh")).catch(() => undefined);
      if (run?.isFile() !== true) throw new WardenError(Code.FailedPrecondition, "the bundle has no regular file run.sh at its root (a LocalAI backend image's layers unpack to a directory holding run.sh)", { details: { reason: unsafeBundleReason } });
      // Runnable whatever mode the archive gave it: the catalog runs it directly.
      await chmod(join(staging, "run.sh"), (run.mode & 0o777) | 0o500);
      const sizeBytes = await diskUsage(staging);
      const made = await index.makeRoom(spec.sha256, sizeBytes, "bytes unpacked (the bundle's size on disk)");
      try {
        await rename(staging, dir);
        const h = await open(dirname(dir), "r");
        try {
          await h.sync();
        } finally {
          await h.close();
        }
        await index.addBundle(spec.sha256, dir, sizeBytes);
      } finally {
        await made.done();
      }
      this.log.info("backend bundle installed", { sha256: spec.sha256, source: spec.source.slice(0, 256), files: tally.entries, bytes: tally.bytes, sizeBytes, by: cause === undefined ? "unknown" : cause.t === "start" ? `start ${cause.incarnation} of model ${cause.model}` : "operator" });
      if (cause?.t === "start") this.o.onStartInstalled?.({ backend: cause.backend, sha256: spec.sha256, source: spec.source.slice(0, 256), model: cause.model, incarnation: cause.incarnation });
      return dir;
    } catch (err) {
      await rm(staging, { recursive: true, force: true });
      const e = WardenError.from(err);
      if (e.details.reason === tarNoRoomReason) throw new WardenError(Code.ResourceExhausted, `no space left in the artifact cache: the bundle unpacks to more than ${String(room.bytes)} bytes; ${room.reason}`, { cause: err });
      if ((err as NodeJS.ErrnoException).code === "ENOSPC") throw new WardenError(Code.ResourceExhausted, `no space left on the file system after ${String(tally.bytes)} bytes unpacked; nothing is installed`, { cause: err });
      throw err;
    }
  }

  /** The image's manifest (verified against the digest): its layers as artifacts of the registry, in order. */
  private async imageLayers(spec: BundleSpec, signal: AbortSignal): Promise<ArtifactSpec[]> {
    const ref = parseOciReference("bundle.source", spec.source);
    const client = new OciRegistryClient(ref, this.o.registryLogin?.(ref.host));
    const manifest = await client.manifest(`sha256:${spec.sha256}`, signal);
    const repo = `${ref.protocol === "http:" ? "oci+http" : "oci"}://${ref.host}/${ref.repository}`;
    return manifest.layers.map((layer, i) => ({ source: repo, sha256: layer.sha256, sizeBytes: layer.sizeBytes, path: `layer-${String(i)}` }));
  }

  /**
   * Peers for the artifacts whose file the cache lacks (one with the right size
   * is only verified, never fetched: asking would take a peer's slot for
   * nothing). Held by the caller until its pulls ended.
   */
  private async peersFor(artifacts: readonly ArtifactSpec[], signal: AbortSignal): Promise<PeerLease> {
    if (this.o.findPeers === undefined) return noPeers;
    const missing: string[] = [];
    for (const a of artifacts) {
      const have = await stat(cachePaths(this.o.modelsPath, a.sha256).final).catch(() => undefined);
      if (have?.size !== a.sizeBytes && !missing.includes(a.sha256)) missing.push(a.sha256);
    }
    return this.o.findPeers(missing, signal);
  }
}

function tarballArtifact(spec: BundleSpec): ArtifactSpec {
  return { source: spec.source, sha256: spec.sha256, sizeBytes: spec.sizeBytes ?? 0, path: "bundle.tar" };
}

async function isInstalled(dir: string): Promise<boolean> {
  const st = await lstat(join(dir, "run.sh")).catch(() => undefined);
  return st?.isFile() === true;
}
