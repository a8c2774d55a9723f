import { lstat, readdir, stat, unlink } from "node:fs/promises";
import { join } from "node:path";
import { Code, WardenError, isHex64, type Clock, type Logger } from "@warden/common";
import { cachePaths } from "./artifact-pull.js";
import { planRoom, roomBytes, roomToMake, type CacheEntry, type MakeableRoom } from "./cache-room-plan.js";
import { diskUsage } from "./disk-usage.js";

/**
 * What the index needs of the bundle installer (backend-bundle.ts), which
 * registers itself: the bundles starts are using, and their eviction.
 */
export interface BundleHooks {
  /** Digests of bundles a start (or InstallBundle) is installing or launching now. */
  inUse(): Iterable<string>;
  /**
   * Removes an installed bundle (renamed away, then deleted). Marks it as
   * going before returning, synchronously, so a start asking for it from
   * then on waits for the removal and installs it again.
   */
  evict(sha256: string): Promise<void>;
}

/** Cached files and bundles the index tracks; beyond it a pull is refused (the heartbeat's digest bound). */
export const maxCacheEntries = 65_536;

export interface CacheIndexOptions {
  readonly modelsPath: string;
  readonly clock: Clock;
  readonly logger: Logger;
  /** The agent's disk budget for the cache (`artifactCacheBudget`); undefined = the file system's free space only. */
  readonly budgetBytes: number | undefined;
  /** Free bytes of the cache's file system. */
  readonly freeBytes: (dir: string) => Promise<number>;
  /**
   * The artifact digests of each live (not exited) backend in the agent's
   * table; undefined for one whose files are not known (adopted from an older
   * agent's record): then nothing is evicted while it lives.
   */
  readonly liveDigests: () => Iterable<readonly string[] | undefined>;
  /** Told of each eviction once its file is gone (the heartbeat reports it: eviction-outbox.ts). */
  readonly onEvicted?: (e: { readonly sha256: string; readonly sizeBytes: number; readonly reason: string }) => void;
}

/** What the heartbeat reports of the cache (ArtifactCacheReport). */
export interface CacheReport {
  readonly freeBytes: number;
  readonly evictableBytes: number;
  /** Changes whenever the set of verified digests does. */
  readonly digestsVersion: number;
}

const key = (sha256: string, kind: CacheEntry["kind"]): string => `${kind}:${sha256}`;

/**
 * What the cache holds, by file, kept in memory (one directory scan at first
 * use, then a stat of the digest a pull touched), and who uses what: a start
 * holds its artifacts' digests from before its pull until it ends, and a live
 * backend holds the ones its record names. Makes room for a pull within the disk budget by evicting
 * least recently used files that no running or starting backend uses and no
 * pull writes (cache-room-plan.ts), each eviction logged; a bundle install
 * asks the most it may unpack (roomToMake), then room for its size on disk.
 */
export class CacheIndex {
  private readonly entries = new Map<string, CacheEntry>();
  private heldBytes = 0;
  private reservedBytes = 0;
  private version = 0;
  private scanned: Promise<void> | undefined;
  /** incarnation → digests of a start in progress (its backend, once in the table, holds them itself); `bundle-install:<sha256>` → the layers an install reads. */
  private readonly holds = new Map<string, readonly string[]>();
  /** Digests a pull is writing now. */
  private readonly writing = new Set<string>();
  private readonly log: Logger;
  private bundles: BundleHooks | undefined;

  constructor(private readonly o: CacheIndexOptions) {
    this.log = o.logger.child({ component: "artifact-cache" });
  }

  /** Reads the cache's directories once (the agent may have restarted with files there). */
  ready(): Promise<void> {
    this.scanned ??= this.scan();
    return this.scanned;
  }

  hold(incarnation: string, digests: readonly string[]): void {
    this.holds.set(incarnation, digests);
  }

  release(incarnation: string): void {
    this.holds.delete(incarnation);
  }

  /** A start used the digest's file (or, with kind `bundle`, its installed bundle). */
  touch(sha256: string, kind: "final" | "bundle" = "final"): void {
    const e = this.entries.get(key(sha256, kind));
    if (e !== undefined) this.entries.set(key(sha256, kind), { ...e, lastUsedMs: this.o.clock.wallNow() });
  }

  /** The bundle installer, so installed bundles count against the budget and can be evicted. */
  attachBundles(hooks: BundleHooks): void {
    this.bundles = hooks;
  }

  /** A bundle was installed: its directory's on-disk size (`sizeBytes` when the installer measured it already) counts from now, used now. */
  async addBundle(sha256: string, dir: string, sizeBytes?: number): Promise<void> {
    await this.ready();
    const size = sizeBytes ?? (await diskUsage(dir));
    this.put({ sha256, kind: "bundle", sizeBytes: size, lastUsedMs: this.o.clock.wallNow() });
  }

  /** A bundle was removed (RemoveBundle). */
  forgetBundle(sha256: string): void {
    const e = this.entries.get(key(sha256, "bundle"));
    if (e !== undefined) this.forget(e);
  }

  /** Whether the cache holds the digest's verified file (`final`) or its installed bundle (`bundle`). */
  has(sha256: string, kind: "final" | "bundle"): boolean {
    return this.entries.has(key(sha256, kind));
  }

  digests(): string[] {
    const out: string[] = [];
    for (const e of this.entries.values()) if (e.kind === "final") out.push(e.sha256);
    return out;
  }

  /** Free room and evictable bytes: proportional to the holds and pulls, not to the cache's files. */
  async report(): Promise<CacheReport> {
    await this.ready();
    const fsFreeBytes = await this.o.freeBytes(this.o.modelsPath);
    const used = this.protectedDigests();
    let protectedBytes = 0;
    for (const d of used) for (const kind of ["final", "partial", "bundle"] as const) protectedBytes += this.entries.get(key(d, kind))?.sizeBytes ?? 0;
    const evictableBytes = used === "all" ? 0 : Math.max(0, this.heldBytes - protectedBytes);
    return { freeBytes: roomBytes({ heldBytes: this.heldBytes, reservedBytes: this.reservedBytes, budgetBytes: this.o.budgetBytes, fsFreeBytes }), evictableBytes, digestsVersion: this.version };
  }

  /**
   * The most a bundle install may unpack (cache-room-plan.ts roomToMake):
   * room now plus every entry no eviction may touch, as makeRoom would judge
   * it. The installer holds its own layers (hold) before asking, so they are
   * not counted as evictable. Advisory: nothing is reserved or evicted; the
   * unpacked size is judged by makeRoom once known.
   */
  async roomToMake(): Promise<MakeableRoom> {
    await this.ready();
    const fsFreeBytes = await this.o.freeBytes(this.o.modelsPath);
    const used = this.protectedDigests();
    return roomToMake({ heldBytes: this.heldBytes, reservedBytes: this.reservedBytes, budgetBytes: this.o.budgetBytes, fsFreeBytes, entries: this.entries.values(), isProtected: (e) => this.isProtected(e, used) });
  }

  /**
   * Makes room for a pull of `sha256` that still has `needBytes` to write
   * (or, with `needLabel`, for an unpacked bundle of that size), evicting as
   * planned, and reserves them until `done` is called (then the digest's
   * files are stat'ed again). RESOURCE_EXHAUSTED when even eviction cannot
   * make room: nothing is evicted then.
   */
  async makeRoom(sha256: string, needBytes: number, needLabel?: string): Promise<{ done: () => Promise<void> }> {
    await this.ready();
    const fsFreeBytes = await this.o.freeBytes(this.o.modelsPath);
    // From here to the reservation nothing awaits: concurrent pulls each see the other's promise.
    if (this.entries.size >= maxCacheEntries && !this.entries.has(key(sha256, "partial"))) throw new WardenError(Code.ResourceExhausted, `no space left in the artifact cache: it holds ${String(maxCacheEntries)} files already`);
    this.writing.add(sha256);
    const used = this.protectedDigests();
    const plan = planRoom({
      needBytes,
      heldBytes: this.heldBytes,
      reservedBytes: this.reservedBytes,
      budgetBytes: this.o.budgetBytes,
      fsFreeBytes,
      ...(needLabel === undefined ? {} : { needLabel }),
      entries: this.entries.values(),
      isProtected: (e) => this.isProtected(e, used),
    });
    if (plan.t === "no-room") {
      this.writing.delete(sha256);
      throw new WardenError(Code.ResourceExhausted, `no space left in the artifact cache: ${plan.reason}`);
    }
    for (const e of plan.evict) this.forget(e);
    // Started (and so marked as going) in this same turn as the plan: no start can take a bundle between the two.
    const removals = new Map<string, Promise<void>>();
    for (const e of plan.evict) {
      if (e.kind !== "bundle" || this.bundles === undefined) continue;
      const p = this.bundles.evict(e.sha256);
      p.catch(() => {}); // awaited below; this keeps an early exit of that loop from leaving it unhandled
      removals.set(e.sha256, p);
    }
    this.reservedBytes += needBytes;
    let released = false;
    const done = async (): Promise<void> => {
      if (released) return;
      released = true;
      this.reservedBytes -= needBytes;
      this.writing.delete(sha256);
      await this.refresh(sha256);
    };
    try {
      for (const e of plan.evict) await this.unlinkEvicted(e, sha256, removals);
    } catch (err) {
      await done();
      throw err;
    }
    return { done };
  }

  /** Re-reads one digest's files (after a pull, successful or not). */
  async refresh(sha256: string): Promise<void> {
    const { final, partial } = cachePaths(this.o.modelsPath, sha256);
    for (const [kind, path] of [["final", final], ["partial", partial]] as const) {
      const st = await stat(path).catch(() => undefined);
      const old = this.entries.get(key(sha256, kind));
      if (st === undefined || !st.isFile()) {
        if (old !== undefined) this.forget(old);
      } else {
        this.put({ sha256, kind, sizeBytes: st.size, lastUsedMs: old?.lastUsedMs ?? st.mtimeMs });
      }
    }
  }

  private dir(): string {
    return join(this.o.modelsPath, ".warden-cache");
  }

  private isProtected(e: CacheEntry, used: ReadonlySet<string> | "all"): boolean {
    // A bundle can only go through its installer (which knows the starts using it).
    return used === "all" || used.has(e.sha256) || (e.kind === "bundle" && this.bundles === undefined);
  }

  /** Digests no eviction may touch; "all" while a live backend's files are not known. */
  private protectedDigests(): ReadonlySet<string> | "all" {
    const out = new Set<string>(this.writing);
    for (const ds of this.holds.values()) for (const d of ds) out.add(d);
    if (this.bundles !== undefined) for (const d of this.bundles.inUse()) out.add(d);
    for (const ds of this.o.liveDigests()) {
      if (ds === undefined) return "all";
      for (const d of ds) out.add(d);
    }
    return out;
  }

  private put(e: CacheEntry): void {
    const k = key(e.sha256, e.kind);
    const old = this.entries.get(k);
    this.heldBytes += e.sizeBytes - (old?.sizeBytes ?? 0);
    this.entries.set(k, e);
    if (old === undefined && e.kind === "final") this.version++;
  }

  private forget(e: CacheEntry): void {
    const k = key(e.sha256, e.kind);
    const old = this.entries.get(k);
    if (old === undefined) return;
    this.entries.delete(k);
    this.heldBytes -= old.sizeBytes;
    if (e.kind === "final") this.version++;
  }

  private async unlinkEvicted(e: CacheEntry, forSha256: string, removals: ReadonlyMap<string, Promise<void>>): Promise<void> {
    if (e.kind === "bundle") {
      await removals.get(e.sha256);
    } else {
      const { final, partial } = cachePaths(this.o.modelsPath, e.sha256);
      await unlink(e.kind === "final" ? final : partial).catch((err: unknown) => {
        if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
      });
    }
    // The cache's audit record: which file went, how big, unused since when, for which pull.
    this.log.info("artifact evicted", { sha256: e.sha256, kind: e.kind, sizeBytes: e.sizeBytes, lastUsedAt: new Date(e.lastUsedMs).toISOString(), forSha256 });
    this.o.onEvicted?.({ sha256: e.sha256, sizeBytes: e.sizeBytes, reason: `least recently used${e.kind === "partial" ? " (a partial download)" : e.kind === "bundle" ? " (an installed backend bundle)" : ""}; room for ${forSha256}` });
  }

  private async scan(): Promise<void> {
    for (const [kind, sub, suffix] of [["final", "sha256", ""], ["partial", "partial", ".partial"]] as const) {
      const dir = join(this.dir(), sub);
      const names = await readdir(dir).catch(() => [] as string[]);
      for (const name of names) {
        const sha256 = suffix === "" ? name : name.slice(0, -suffix.length);
        if (!name.endsWith(suffix) || !isHex64(sha256) || this.entries.size >= maxCacheEntries) continue;
        const st = await stat(join(dir, name)).catch(() => undefined);
        if (st?.isFile() === true) this.put({ sha256, kind, sizeBytes: st.size, lastUsedMs: st.mtimeMs });
      }
    }
    // Installed bundles (a directory holding a regular run.sh), measured once here; last used = the directory's mtime.
    const root = join(this.dir(), "backends");
    for (const sha256 of await readdir(root).catch(() => [] as string[])) {
      if (!isHex64(sha256) || this.entries.size >= maxCacheEntries) continue;
      const dir = join(root, sha256);
      const [st, run] = await Promise.all([lstat(dir).catch(() => undefined), lstat(join(dir, "run.sh")).catch(() => undefined)]);
      if (st?.isDirectory() !== true || run?.isFile() !== true) continue;
      this.put({ sha256, kind: "bundle", sizeBytes: await diskUsage(dir), lastUsedMs: st.mtimeMs });
    }
  }
}
