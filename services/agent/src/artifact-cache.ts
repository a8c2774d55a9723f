import { lstat, stat } from "node:fs/promises";
import { Code, WardenError, deadlineSignal, isOciSource, storePathOf, type ArtifactSpec, type Clock, type Logger } from "@warden/common";
import { CacheIndex, type CacheIndexOptions, type CacheReport } from "./artifact-cache-index.js";
import { cachePaths, pullArtifact, statfsFree, type ArtifactSource, type PullProgress } from "./artifact-pull.js";
import { httpSource, storeSource, type StoreReader } from "./artifact-sources.js";
import { hashFile } from "./peer-upload.js";
import { peerCertificateRefusal, peerSource, type PeerClients, type PeerSpec } from "./peer-source.js";
import { ociBlobSource } from "./oci-blob-source.js";
import type { RegistryLoginLookup } from "./registry-auth.js";
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
  /** Fetching from other agents (peer-source.ts): this node's id and its clients; undefined = peers named by a start are ignored. */
  readonly peers?: { readonly selfNodeId: string; readonly clients: PeerClients };
  /** Credentials of private OCI registries (registryAuthFile), asked at each pull so a reload applies to the next one. @default anonymous */
  readonly registryLogin?: RegistryLoginLookup;
  /** Told of each completed pull that fetched bytes (the heartbeat reports it; the coordinator audits it as artifact.pulled). */
  readonly onPulled?: (p: PullRecord) => void;
}

/** What a pull is for: the start's model, or the backend whose bundle layer it is. */
export interface PullPurpose {
  /** The model whose start asked for it; "" or absent for a bundle an operator installs. */
  readonly model?: string;
  /** The catalog backend whose bundle this is a layer (or tarball) of. */
  readonly backend?: string;
  readonly bundleLayer?: boolean;
}

/** One completed pull (ArtifactPull on the heartbeat). */
export interface PullRecord {
  readonly sha256: string;
  readonly sizeBytes: number;
  readonly path: string;
  readonly model: string;
  readonly backend: string;
  readonly bundleLayer: boolean;
  /** The artifact's own source. */
  readonly origin: string;
  /** Bytes received from each source read, in the order first read; peerNodeId "" is the origin. */
  readonly sources: readonly { readonly peerNodeId: string; readonly bytes: number }[];
  /** Bytes of an earlier, interrupted pull's partial that this pull kept. */
  readonly resumedBytes: number;
  readonly durationMs: number;
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
  /** Digests being pulled now → their size: what a peer may read as it grows (peer-upload.ts). */
  private readonly inFlight = new Map<string, number>();
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

  /** The size of a digest this cache is pulling now; undefined when none is. */
  pullingSize(sha256: string): number | undefined {
    return this.inFlight.get(sha256);
  }

  /**
   * The cached file of a digest when it is verified: by this process and unchanged since
   * (inode, size, mtime), or hashed now. Undefined when it is not there, has another size or
   * does not hash to its name (then it is left for the next pull to replace).
   */
  async verifiedFinal(sha256: string, sizeBytes: number, signal: AbortSignal): Promise<string | undefined> {
    const { final } = cachePaths(this.o.modelsPath, sha256);
    // Only a regular file of the cache: a symlink planted there would lead a peer's read out of it.
    if ((await lstat(final).catch(() => undefined))?.isFile() !== true) return undefined;
    const key = await statKey(final);
    if (key === undefined || key.split(":")[1] !== String(sizeBytes)) return undefined;
    if (this.verified.get(sha256) === key) return final;
    if ((await hashFile(final, signal)) !== sha256) return undefined;
    this.verified.set(sha256, key);
    return final;
  }

  /**
   * The verified file's absolute path; progress goes to `onProgress`. `peers` (the start's, for
   * this digest) are tried in order before the artifact's source. Errors name the artifact (what
   * the start's failure says).
   */
  async ensure(spec: ArtifactSpec, signal: AbortSignal, onProgress: (p: PullProgress) => void, peers: readonly PeerSpec[] = [], purpose: PullPurpose = {}): Promise<string> {
    try {
      // One pull for every waiter: its record names the purpose of the start that began it.
      return await this.flights.run(spec.sha256, signal, (s, report) => this.pull(spec, s, report, peers, purpose), onProgress);
    } catch (err) {
      const e = WardenError.from(err);
      throw new WardenError(e.code, `artifact ${JSON.stringify(spec.path)} (sha256 ${spec.sha256}, source ${spec.source.slice(0, 256)}): ${e.rawMessage}`, { cause: err, details: { field: "artifacts" } });
    }
  }

  private async pull(spec: ArtifactSpec, flight: AbortSignal, report: (p: PullProgress) => void, peers: readonly PeerSpec[], purpose: PullPurpose): Promise<string> {
    const storePath = storePathOf(spec.source);
    const reader = this.o.storeReader;
    if (storePath !== undefined && reader === undefined) throw new WardenError(Code.FailedPrecondition, "this agent reads no coordinator store (it runs without --coordinator)");
    const origin = storePath !== undefined ? storeSource(reader as StoreReader, storePath, spec.sizeBytes) : isOciSource(spec.source) ? ociBlobSource(spec.source, spec.sha256, spec.sizeBytes, this.o.registryLogin) : httpSource(spec.source, spec.sizeBytes);
    const p2p = this.o.peers;
    // Peers first (the coordinator named them: holders, or agents pulling the digest now), then the origin.
    const tally = new ByteTally();
    const sources: { readonly from: string; readonly source: ArtifactSource }[] = [
      ...(p2p === undefined ? [] : peers.filter((p) => p.nodeId !== p2p.selfNodeId).map((p) => ({ from: `peer ${p.nodeId}`, source: tally.counted(p.nodeId, peerSource(p2p.clients.get(p), p2p.selfNodeId, p, spec.sha256, spec.sizeBytes)) }))),
      { from: "origin", source: tally.counted("", origin) },
    ];
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
    // A final file already of the right size is only hashed: no pull to audit when that is all that happens.
    const finalWasThere = (await stat(final).catch(() => undefined))?.size === spec.sizeBytes;
    let room: { done: () => Promise<void> } | undefined;
    try {
      // Room within the disk budget for what is still to fetch, made by evicting unused files (LRU).
      room = await this.index.makeRoom(spec.sha256, await bytesToFetch(final, partial, spec.sizeBytes));
      this.inFlight.set(spec.sha256, spec.sizeBytes);
      const attempt = (source: ArtifactSource): Promise<string> =>
        pullArtifact({
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
      const path = await this.firstThatServes(spec, sources, attempt, dl.signal);
      const key = await statKey(path);
      if (key !== undefined) this.verified.set(spec.sha256, key);
      await room.done();
      this.index.touch(spec.sha256);
      const ms = this.o.clock.now() - t0;
      const fetched = tally.sources();
      if (fetched.length > 0 || !finalWasThere) {
        // No source opened and no final file before: the partial was complete already (all of it resumed).
        const record: PullRecord = { sha256: spec.sha256, sizeBytes: spec.sizeBytes, path: spec.path, model: purpose.model ?? "", backend: purpose.backend ?? "", bundleLayer: purpose.bundleLayer === true, origin: spec.source.slice(0, 256), sources: fetched, resumedBytes: tally.resumedBytes ?? spec.sizeBytes, durationMs: ms };
        this.o.onPulled?.(record);
        this.log.info("artifact ready", { sha256: spec.sha256, path: spec.path, sizeBytes: spec.sizeBytes, ms, sources: fetched.map((f) => `${f.peerNodeId === "" ? "origin" : `peer ${f.peerNodeId}`}: ${String(f.bytes)}`).join(", "), resumedBytes: record.resumedBytes });
      } else {
        this.log.info("artifact ready", { sha256: spec.sha256, path: spec.path, sizeBytes: spec.sizeBytes, ms, sources: "already in the cache" });
      }
      return path;
    } catch (err) {
      this.log.warn("artifact pull failed", { sha256: spec.sha256, path: spec.path, source: spec.source.slice(0, 256), err: WardenError.from(err).rawMessage });
      throw err;
    } finally {
      this.inFlight.delete(spec.sha256);
      await room?.done();
      dl.cleanup();
    }
  }

  /**
   * Tries each source in order; a failing peer (dead, refusing, stalled, wrong bytes) passes to
   * the next source, resuming from what the partial holds (the whole file's SHA-256 is checked
   * at the end, whoever sent which part). When the origin's bytes then fail the check, a peer's
   * bytes may be the bad prefix: the origin is asked once more from byte 0 (the failed check
   * removed the partial). A local failure (no space) or the deadline ends the pull at once.
   */
  private async firstThatServes(spec: ArtifactSpec, sources: readonly { readonly from: string; readonly source: ArtifactSource }[], attempt: (s: ArtifactSource) => Promise<string>, signal: AbortSignal): Promise<string> {
    for (let i = 0; i < sources.length; i++) {
      const s = sources[i] as (typeof sources)[number];
      try {
        const path = await attempt(s.source);
        if (s.from !== "origin") this.log.info("artifact fetched from a peer", { sha256: spec.sha256, from: s.from });
        return path;
      } catch (err) {
        const e = WardenError.from(err);
        if (signal.aborted || e.code === Code.ResourceExhausted) throw err;
        if (s.from === "origin") {
          if (i > 0 && e.code === Code.DataLoss) return attempt(s.source);
          throw err;
        }
        const refused = peerCertificateRefusal(e.rawMessage);
        if (refused !== undefined) this.log.warn("peer refused: its certificate does not name the node; trying the next source", { sha256: spec.sha256, from: s.from, err: refused });
        else this.log.warn("peer fetch failed; trying the next source", { sha256: spec.sha256, from: s.from, err: e.rawMessage });
      }
    }
    throw new WardenError(Code.Internal, "no source");
  }
}

/**
 * Bytes each source of one pull sent, counted as the pull reads them, and
 * what the partial held when the first source answered (bytes of an earlier
 * pull that this one kept).
 */
class ByteTally {
  private readonly bytes = new Map<string, number>();
  resumedBytes: number | undefined;

  counted(peerNodeId: string, source: ArtifactSource): ArtifactSource {
    return {
      open: async (offset, signal) => {
        const body = await source.open(offset, signal);
        this.resumedBytes ??= body.from;
        if (!this.bytes.has(peerNodeId)) this.bytes.set(peerNodeId, 0);
        const add = (n: number): void => {
          this.bytes.set(peerNodeId, (this.bytes.get(peerNodeId) ?? 0) + n);
        };
        return {
          from: body.from,
          chunks: (async function* () {
            for await (const c of body.chunks) {
              add(c.byteLength);
              yield c;
            }
          })(),
        };
      },
    };
  }

  /** Sources that answered, in the order first read (a peer that failed before any byte shows 0). */
  sources(): { peerNodeId: string; bytes: number }[] {
    return [...this.bytes].map(([peerNodeId, bytes]) => ({ peerNodeId, bytes }));
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
