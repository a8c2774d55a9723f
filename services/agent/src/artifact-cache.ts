import { stat } from "node:fs/promises";
import { Code, WardenError, deadlineSignal, isOciSource, storePathOf, type ArtifactSpec, type Clock, type Logger } from "@warden/common";
import { CacheIndex, type CacheIndexOptions, type CacheReport } from "./artifact-cache-index.js";
import { cachePaths, pullArtifact, statfsFree, type PullProgress } from "./artifact-pull.js";
import { httpSource, storeSource, type StoreReader } from "./artifact-sources.js";
import { ociBlobSource } from "./oci-blob-source.js";
import { SingleFlight } from "./single-flight.js";

export interface ArtifactCacheOptions {
  readonly modelsPath: string;
  readonly clock: Clock;
  readonly logger: Logger;
  /** One pull's whole budget, however many starts wait on it. */
  readonly pullTimeoutMs: number;
  /** No byte for this long fails the pull (the partial stays). */
  readonly stallTimeoutMs: number;
  /** The coordinators' store; undefined = `store:` sources fail FAILED_PRECONDITION (no --coordinator). */
  readonly storeReader: StoreReader | undefined;
  /** Test seam for the free-space check (statfs by default). */
  readonly freeBytes?: (dir: string) => Promise<number>;
  /** Told of each eviction (the heartbeat reports it). */
  readonly onEvicted?: CacheIndexOptions["onEvicted"];
  /** The disk budget (`artifactCacheBudget`); undefined = the file system's free space only. */
  readonly budgetBytes?: number;
  /** Digests each live backend uses (undefined: not known); see CacheIndexOptions. @default none */
  readonly liveDigests?: () => Iterable<readonly string[] | undefined>;
}

/**
 * The agent's content-addressed artifact cache under modelsPath
 * (`.warden-cache/sha256/<hex>`, docs/artifacts.md): one pull per digest
 * however many starts ask for it (SingleFlight), each start waiting with
 * its own signal; the pull stops when the last one gave up.
 */
export class ArtifactCache {
  private readonly flights = new SingleFlight<string, PullProgress>();
  /**
   * Files this process verified, by digest, with the stat that was verified:
   * a later start uses the file without hashing it again while it is the same
   * file (inode, size, mtime). One entry per cached digest.
   */
  private readonly verified = new Map<string, string>();
  private readonly log: Logger;
  /** Files held, who uses them, the budget and eviction (artifact-cache-index.ts). */
  readonly index: CacheIndex;

  constructor(private readonly o: ArtifactCacheOptions) {
    this.log = o.logger.child({ component: "artifacts" });
    this.index = new CacheIndex({ modelsPath: o.modelsPath, clock: o.clock, logger: o.logger, budgetBytes: o.budgetBytes, freeBytes: o.freeBytes ?? statfsFree, liveDigests: o.liveDigests ?? (() => []), ...(o.onEvicted === undefined ? {} : { onEvicted: o.onEvicted }) });
  }

  /** What the heartbeat reports (free room, evictable bytes, the digests' version). */
  report(): Promise<CacheReport> {
    return this.index.report();
  }

  /** Pulls in progress (digests). */
  pulling(): number {
    return this.flights.size();
  }

  /** The verified file's absolute path; progress goes to `onProgress`. Errors name the artifact (what the start's failure says). */
  async ensure(spec: ArtifactSpec, signal: AbortSignal, onProgress: (p: PullProgress) => void): Promise<string> {
    try {
      return await this.flights.run(spec.sha256, signal, (s, report) => this.pull(spec, s, report), onProgress);
    } catch (err) {
      const e = WardenError.from(err);
      throw new WardenError(e.code, `artifact ${JSON.stringify(spec.path)} (sha256 ${spec.sha256}, source ${spec.source.slice(0, 256)}): ${e.rawMessage}`, { cause: err, details: { field: "artifacts" } });
    }
  }

  private async pull(spec: ArtifactSpec, flight: AbortSignal, report: (p: PullProgress) => void): Promise<string> {
    const storePath = storePathOf(spec.source);
    const reader = this.o.storeReader;
    if (storePath !== undefined && reader === undefined) throw new WardenError(Code.FailedPrecondition, "this agent reads no coordinator store (it runs without --coordinator)");
    const source = storePath !== undefined ? storeSource(reader as StoreReader, storePath, spec.sizeBytes) : isOciSource(spec.source) ? ociBlobSource(spec.source, spec.sha256, spec.sizeBytes) : httpSource(spec.source, spec.sizeBytes);
    const { final, partial } = cachePaths(this.o.modelsPath, spec.sha256);
    await this.index.ready();
    const seen = this.verified.get(spec.sha256);
    if (seen !== undefined && seen === (await statKey(final))) {
      this.index.touch(spec.sha256);
      report({ sha256: spec.sha256, path: spec.path, doneBytes: spec.sizeBytes, totalBytes: spec.sizeBytes, verified: true });
      return final;
    }
    this.verified.delete(spec.sha256);
    const dl = deadlineSignal(this.o.clock, this.o.pullTimeoutMs, `pull of sha256 ${spec.sha256.slice(0, 12)}`, flight);
    const t0 = this.o.clock.now();
    let room: { done: () => Promise<void> } | undefined;
    try {
      // Room within the disk budget for what is still to fetch, made by evicting unused files (LRU).
      room = await this.index.makeRoom(spec.sha256, await bytesToFetch(final, partial, spec.sizeBytes));
      const path = await pullArtifact({
        spec,
        modelsPath: this.o.modelsPath,
        source,
        clock: this.o.clock,
        stallTimeoutMs: this.o.stallTimeoutMs,
        signal: dl.signal,
        ...(this.o.freeBytes === undefined ? {} : { freeBytes: this.o.freeBytes }),
        report: (p) => {
          if (!p.verified) this.log.debug("artifact pulling", { sha256: spec.sha256, path: spec.path, doneBytes: p.doneBytes, totalBytes: p.totalBytes });
          report(p);
        },
      });
      const key = await statKey(path);
      if (key !== undefined) this.verified.set(spec.sha256, key);
      await room.done();
      this.index.touch(spec.sha256);
      this.log.info("artifact ready", { sha256: spec.sha256, path: spec.path, sizeBytes: spec.sizeBytes, ms: this.o.clock.now() - t0 });
      return path;
    } catch (err) {
      this.log.warn("artifact pull failed", { sha256: spec.sha256, path: spec.path, source: spec.source.slice(0, 256), err: WardenError.from(err).rawMessage });
      throw err;
    } finally {
      await room?.done();
      dl.cleanup();
    }
  }
}

/** Bytes a pull still writes: none for a final file of the right size (it is only hashed), else what the partial lacks. */
async function bytesToFetch(final: string, partial: string, sizeBytes: number): Promise<number> {
  const size = async (p: string): Promise<number | undefined> => (await stat(p).catch(() => undefined))?.size;
  if ((await size(final)) === sizeBytes) return 0;
  const p = await size(partial);
  return p !== undefined && p <= sizeBytes ? sizeBytes - p : sizeBytes;
}

/** What identifies one version of a file: inode, size and mtime; undefined when it is not there. */
async function statKey(path: string): Promise<string | undefined> {
  try {
    const st = await stat(path, { bigint: true });
    return `${String(st.ino)}:${String(st.size)}:${String(st.mtimeNs)}`;
  } catch {
    return undefined;
  }
}
