import { createHash, type Hash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, open, rename, stat, statfs, truncate, unlink } from "node:fs/promises";
import { dirname, join } from "node:path";
import { Code, WardenError, abortReason, type ArtifactSpec, type Clock } from "@warden/common";
import { planPull, progressDue } from "./artifact-plan.js";

/** Where an artifact's bytes come from (artifact-sources.ts). */
export interface ArtifactSource {
  /**
   * The artifact's bytes from `offset` on. `from` is where the body really
   * starts: `offset`, or 0 when the source cannot resume (the partial restarts).
   * Throws WardenError: NOT_FOUND (no such file), DATA_LOSS (the source holds
   * another file: the partial is dropped), UNAVAILABLE (anything else).
   */
  open(offset: number, signal: AbortSignal): Promise<{ from: number; chunks: AsyncIterable<Uint8Array> }>;
}

/** Pull progress, as StartBackend's `pulling` event carries it. */
export interface PullProgress {
  readonly sha256: string;
  readonly path: string;
  readonly doneBytes: number;
  readonly totalBytes: number;
  readonly verified: boolean;
}

/** The cache's layout under modelsPath (services/agent/docs/artifacts.md). */
export function cachePaths(modelsPath: string, sha256: string): { final: string; partial: string } {
  const root = join(modelsPath, ".warden-cache");
  return { final: join(root, "sha256", sha256), partial: join(root, "partial", `${sha256}.partial`) };
}

export interface PullOptions {
  readonly spec: ArtifactSpec;
  readonly modelsPath: string;
  readonly source: ArtifactSource;
  readonly clock: Clock;
  /** No byte for this long: the pull fails UNAVAILABLE and keeps its partial. */
  readonly stallTimeoutMs: number;
  readonly signal: AbortSignal;
  readonly report: (p: PullProgress) => void;
  /** Free bytes of the cache's file system (test seam; statfs by default). */
  readonly freeBytes?: (dir: string) => Promise<number>;
}

async function sizeOf(path: string): Promise<number | undefined> {
  try {
    return (await stat(path)).size;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}

async function removeIfThere(path: string): Promise<void> {
  await unlink(path).catch((err: unknown) => {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  });
}

/** Feeds the file's first `bytes` bytes into `hash`. */
async function hashPrefix(path: string, bytes: number, hash: Hash, signal: AbortSignal): Promise<void> {
  if (bytes === 0) return;
  for await (const chunk of createReadStream(path, { start: 0, end: bytes - 1, signal })) hash.update(chunk as Buffer);
}

async function fsyncPath(path: string, flags: string): Promise<void> {
  const h = await open(path, flags);
  try {
    await h.sync();
  } finally {
    await h.close();
  }
}

/**
 * Bytes free to this process on the file system holding `dir`. A directory not made yet (a fresh
 * `modelsPath`, the cache before its first pull) is judged by its nearest existing parent: the
 * file system it will be created on.
 */
export async function statfsFree(dir: string): Promise<number> {
  for (let at = dir; ; at = dirname(at)) {
    try {
      const s = await statfs(at);
      return s.bavail * s.bsize;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT" || dirname(at) === at) throw err;
    }
  }
}

function noSpace(detail: string): WardenError {
  return new WardenError(Code.ResourceExhausted, `no space left in the artifact cache: ${detail}`);
}

/**
 * Pulls one artifact into the content-addressed cache and returns its final
 * path. A file already at the final path is hashed and used when it matches
 * (an earlier pull, or a volume shared by several nodes). Otherwise the bytes
 * go to `<hex>.partial`, resumed from its size when the source can; the
 * partial is fsync'd, its SHA-256 checked, then renamed into place (and the
 * directory fsync'd), so the final path only ever holds a verified file.
 * Failures (WardenError): DATA_LOSS — the bytes are not the artifact (the
 * partial is removed); NOT_FOUND; UNAVAILABLE — unreachable, dropped, stalled
 * (the partial stays for the next attempt); RESOURCE_EXHAUSTED — no space
 * (the partial stays); the signal's reason when aborted.
 */
export async function pullArtifact(o: PullOptions): Promise<string> {
  const { spec, signal } = o;
  const { final, partial } = cachePaths(o.modelsPath, spec.sha256);
  await mkdir(dirname(final), { recursive: true });
  await mkdir(dirname(partial), { recursive: true });
  const progress = (doneBytes: number, verified: boolean): PullProgress => ({ sha256: spec.sha256, path: spec.path, doneBytes, totalBytes: spec.sizeBytes, verified });
  let plan = planPull({ finalBytes: await sizeOf(final), partialBytes: await sizeOf(partial) }, spec.sizeBytes);
  if (plan.t === "verify-final") {
    const h = createHash("sha256");
    await hashPrefix(final, spec.sizeBytes, h, signal);
    if (h.digest("hex") === spec.sha256) {
      o.report(progress(spec.sizeBytes, true));
      return final;
    }
    // Not what its name promises (written by hand, or damaged): it goes, and the pull starts over.
    await removeIfThere(final);
    plan = planPull({ finalBytes: undefined, partialBytes: await sizeOf(partial) }, spec.sizeBytes);
  }
  let hash = createHash("sha256");
  let done: number;
  if (plan.t === "fetch") {
    if (plan.dropFinal) await removeIfThere(final);
    if (plan.truncatePartial) await truncate(partial, 0);
    const free = await (o.freeBytes ?? statfsFree)(dirname(partial));
    if (free < spec.sizeBytes - plan.offset) throw noSpace(`${String(spec.sizeBytes - plan.offset)} bytes to fetch, ${String(free)} free`);
    // The partial's bytes are hashed again (a hash state cannot be saved): the resume costs a read, never a download.
    await hashPrefix(partial, plan.offset, hash, signal);
    try {
      ({ done, hash } = await fetchInto(o, partial, hash, plan.offset, progress));
    } catch (err) {
      // The source holds another file: the bytes so far are no prefix of the artifact.
      if (err instanceof WardenError && err.code === Code.DataLoss) await removeIfThere(partial);
      throw err;
    }
  } else {
    await hashPrefix(partial, spec.sizeBytes, hash, signal);
    done = spec.sizeBytes;
  }
  await fsyncPath(partial, "r+");
  const got = hash.digest("hex");
  if (got !== spec.sha256) {
    await removeIfThere(partial);
    throw new WardenError(Code.DataLoss, `the ${String(done)} bytes fetched hash to sha256 ${got}, not the artifact's; the partial file was removed`);
  }
  await rename(partial, final);
  await fsyncPath(dirname(final), "r");
  o.report(progress(spec.sizeBytes, true));
  return final;
}

/** Appends the source's bytes to the partial from `start` (its prefix already in `prefixHash`); returns the bytes it then holds and their hash. */
async function fetchInto(o: PullOptions, partial: string, prefixHash: Hash, start: number, progress: (doneBytes: number, verified: boolean) => PullProgress): Promise<{ done: number; hash: Hash }> {
  const { spec, clock } = o;
  let done = start;
  let hash = prefixHash;
  let reported = -1;
  const stallCtl = new AbortController();
  const signal = AbortSignal.any([o.signal, stallCtl.signal]);
  let cancelStall = (): void => {};
  const armStall = (): void => {
    cancelStall();
    cancelStall = clock.setTimer(o.stallTimeoutMs, () => {
      stallCtl.abort(new WardenError(Code.Unavailable, `the source sent no byte for ${String(o.stallTimeoutMs)}ms (stalled at ${String(done)} of ${String(spec.sizeBytes)} bytes); the partial file is kept for a resume`));
    });
  };
  const emit = (): void => {
    if (reported === -1 || progressDue(reported, done, spec.sizeBytes)) {
      reported = done;
      o.report(progress(done, false));
    }
  };
  emit();
  armStall();
  let body: Awaited<ReturnType<ArtifactSource["open"]>>;
  try {
    body = await o.source.open(done, signal);
  } catch (err) {
    cancelStall();
    throw signal.aborted ? abortReason(signal) : err;
  }
  // Opened once the source answered: a source that is missing or unreachable leaves no empty partial.
  const file = await open(partial, "a");
  try {
    if (body.from !== done) {
      // The source cannot resume: start over (the bytes kept would not line up).
      await file.truncate(0);
      done = 0;
      hash = createHash("sha256");
    }
    armStall();
    try {
      for await (const chunk of body.chunks) {
        armStall();
        if (done + chunk.byteLength > spec.sizeBytes) {
          await file.close().catch(() => {});
          await removeIfThere(partial);
          throw new WardenError(Code.DataLoss, `the source sent more than the artifact's ${String(spec.sizeBytes)} bytes; the partial file was removed`);
        }
        // The chunk is hashed on this thread while the write runs on the thread pool (neither changes it).
        const written = file.write(chunk);
        hash.update(chunk);
        try {
          await written;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === "ENOSPC") throw noSpace(`disk full at ${String(done)} of ${String(spec.sizeBytes)} bytes; the partial file is kept for a resume`);
          throw err;
        }
        done += chunk.byteLength;
        emit();
      }
    } catch (err) {
      if (signal.aborted) throw abortReason(signal);
      const e = WardenError.from(err);
      if (e.code === Code.DataLoss || e.code === Code.ResourceExhausted) throw e;
      throw new WardenError(Code.Unavailable, `the connection failed at ${String(done)} of ${String(spec.sizeBytes)} bytes (${e.rawMessage}); the partial file is kept for a resume`);
    }
    if (done < spec.sizeBytes) throw new WardenError(Code.Unavailable, `the source ended at ${String(done)} of ${String(spec.sizeBytes)} bytes; the partial file is kept for a resume`);
    await file.sync();
    return { done, hash };
  } finally {
    cancelStall();
    await file.close().catch(() => {});
  }
}
