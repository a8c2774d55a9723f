import { createHash } from "node:crypto";
import { constants, createReadStream } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import { Code, WardenError, abortReason, isHex64, maxArtifactBytes, peerTicketRefusal, sleep, type Clock, type Logger } from "@warden/common";
import { peerIdentity, type ServiceImpl } from "@warden/grpc";
import type { PeerArtifactService, ReadPeerArtifactRequest } from "@warden/proto";
import type { ArtifactCache } from "./artifact-cache.js";
import { cachePaths } from "./artifact-pull.js";
import { maxPeerNodeIdChars } from "./peer-source.js";

/** Bytes per chunk sent to a peer: 256 KiB streamed through grpc-js about twice as fast as 1 MiB or 64 KiB (loopback, 2 cores); with the 8 MiB window, 1 MiB cost the same CPU again. */
export const peerChunkBytes = 256 * 1024;
/** Peer uploads one agent serves at once; one more is RESOURCE_EXHAUSTED (the requester moves on). */
export const maxPeerUploads = 4;
/** How long a read of a digest this agent neither holds nor pulls waits for its pull to begin. */
export const pullBeginWaitMs = 5_000;
/** How often a partial being written is looked at again for new bytes. */
const growPollMs = 20;

/** The file's SHA-256 (hex). */
export async function hashFile(path: string, signal: AbortSignal): Promise<string> {
  const h = createHash("sha256");
  for await (const chunk of createReadStream(path, { signal })) h.update(chunk as Buffer);
  return h.digest("hex");
}

export interface PeerUploadOptions {
  readonly nodeId: string;
  /** This agent's peer key (peer-key.ts): tickets for it are HMACs under it. */
  readonly key: Uint8Array;
  readonly cache: ArtifactCache;
  readonly modelsPath: string;
  readonly clock: Clock;
  readonly logger: Logger;
  /** A partial that does not grow for this long ends the upload UNAVAILABLE. */
  readonly stallTimeoutMs: number;
}

/**
 * PeerArtifactService: another agent reads one digest of this cache with a
 * ticket the coordinator granted it (peer-ticket.ts). Only two files can ever
 * be opened: `.warden-cache/sha256/<hex>` once verified, or the partial of a
 * pull of `<hex>` running now — the digest is checked as 64 hex characters
 * before any path is made of it, and both are opened O_NOFOLLOW. A partial is
 * streamed as it grows (the requester checks the whole file's SHA-256).
 */
export function createPeerArtifactService(o: PeerUploadOptions): ServiceImpl<typeof PeerArtifactService> {
  let uploads = 0;
  const log = o.logger.child({ component: "peer-upload" });
  return {
    async *readPeerArtifact(req, ctx) {
      const { sizeBytes, offset } = checkRequest(req);
      const identity = peerIdentity(ctx);
      // With mutual TLS the certificate must be the requester's own: a ticket that leaked to another
      // node is of no use to it, nor to an operator's or the coordinator's certificate (they name no
      // node, and no agent reads a peer with one).
      if (identity !== undefined && identity.nodeId !== req.requesterNodeId) {
        const named = identity.nodeId === undefined ? `(CN "${identity.commonName}") names no node` : `names node "${identity.nodeId}"`;
        log.warn("peer read refused", { sha256: req.sha256, requester: req.requesterNodeId, peer: ctx.peer, why: `certificate ${named}` });
        throw new WardenError(Code.PermissionDenied, `the caller's certificate ${named}, the ticket "${req.requesterNodeId}"`);
      }
      const refusal = peerTicketRefusal(o.key, { sha256: req.sha256, requesterNodeId: req.requesterNodeId, holderNodeId: o.nodeId, expiresAtMs: Number(req.expiresAtMs) }, req.ticket, o.clock.wallNow());
      if (refusal !== undefined) {
        log.warn("peer read refused", { sha256: req.sha256, requester: req.requesterNodeId, peer: ctx.peer, why: refusal });
        throw new WardenError(Code.Unauthenticated, `peer read refused: ${refusal}`);
      }
      if (uploads >= maxPeerUploads) throw new WardenError(Code.ResourceExhausted, `this agent already serves ${String(maxPeerUploads)} peer uploads`);
      uploads++;
      try {
        yield* stream(o, req.sha256, sizeBytes, offset, ctx.signal);
      } finally {
        uploads--;
      }
    },
  };
}

function checkRequest(req: ReadPeerArtifactRequest): { sizeBytes: number; offset: number } {
  const bad = (field: string, why: string): WardenError => new WardenError(Code.InvalidArgument, `${field}: ${why}`, { details: { field } });
  if (!isHex64(req.sha256)) throw bad("sha256", "must be 64 lowercase hex characters");
  if (req.sizeBytes > BigInt(maxArtifactBytes)) throw bad("size_bytes", `must be at most ${String(maxArtifactBytes)}`);
  if (req.offset > req.sizeBytes) throw bad("offset", "must be at most size_bytes");
  if (req.requesterNodeId === "" || req.requesterNodeId.length > maxPeerNodeIdChars) throw bad("requester_node_id", `must be 1 to ${String(maxPeerNodeIdChars)} characters`);
  return { sizeBytes: Number(req.sizeBytes), offset: Number(req.offset) };
}

async function openNoFollow(path: string): Promise<FileHandle | undefined> {
  try {
    return await open(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch (err) {
    // ELOOP: a symlink where a cache file should be is never followed; it is served as nothing.
    if ((err as NodeJS.ErrnoException).code === "ENOENT" || (err as NodeJS.ErrnoException).code === "ELOOP") return undefined;
    throw err;
  }
}

async function* stream(o: PeerUploadOptions, sha256: string, sizeBytes: number, offset: number, signal: AbortSignal): AsyncGenerator<{ offset: bigint; totalBytes: bigint; data: Uint8Array }> {
  const { final, partial } = cachePaths(o.modelsPath, sha256);
  let file: FileHandle | undefined;
  let growing = false;
  if ((await o.cache.verifiedFinal(sha256, sizeBytes, signal)) !== undefined) file = await openNoFollow(final);
  if (file === undefined) {
    // A valid ticket says the coordinator sent this node a start needing the digest: a requester
    // told at the same moment may ask before that start began its pull. Wait a little for it.
    const askedAt = o.clock.now();
    while (o.cache.pullingSize(sha256) !== sizeBytes && o.clock.now() - askedAt < pullBeginWaitMs) await sleep(o.clock, growPollMs * 5, signal);
    // A pull that began and ended while this waited left the verified file.
    if (o.cache.pullingSize(sha256) === undefined && (await o.cache.verifiedFinal(sha256, sizeBytes, signal)) !== undefined) file = await openNoFollow(final);
  }
  if (file === undefined) {
    if (o.cache.pullingSize(sha256) !== sizeBytes) throw new WardenError(Code.NotFound, `this agent neither holds nor pulls sha256 ${sha256} of ${String(sizeBytes)} bytes`);
    // The pull opens its partial once its source answered: wait for it as for any growth.
    const since = o.clock.now();
    while ((file = await openNoFollow(partial)) === undefined) {
      if (o.cache.pullingSize(sha256) === undefined) file = await openNoFollow(final);
      if (file !== undefined) break;
      if (o.cache.pullingSize(sha256) === undefined || o.clock.now() - since > o.stallTimeoutMs) throw new WardenError(Code.Unavailable, `the pull of sha256 ${sha256} ended before it wrote a byte`);
      await sleep(o.clock, growPollMs, signal);
    }
    growing = true;
  }
  // One read ahead: the next chunk comes off the file while this one is framed and sent.
  let ahead: Promise<Buffer> | undefined;
  const readAt = async (fh: FileHandle, at: number): Promise<Buffer> => {
    const want = Math.min(peerChunkBytes, sizeBytes - at);
    const buf = Buffer.allocUnsafe(want);
    // The partial's inode stays the file's through the rename to its final name: reading on follows it.
    const { bytesRead } = await fh.read(buf, 0, want, at);
    return buf.subarray(0, bytesRead);
  };
  try {
    let at = offset;
    let lastGrowth = o.clock.now();
    if (sizeBytes === 0) yield { offset: 0n, totalBytes: 0n, data: new Uint8Array(0) };
    while (at < sizeBytes) {
      if (signal.aborted) throw abortReason(signal);
      const data = await (ahead ?? readAt(file, at));
      ahead = undefined;
      if (data.byteLength > 0) {
        const from = at;
        at += data.byteLength;
        lastGrowth = o.clock.now();
        if (at < sizeBytes) {
          ahead = readAt(file, at);
          // Its failure is seen where it is awaited; while this chunk waits on the requester it is no unhandled rejection.
          ahead.catch(() => undefined);
        }
        yield { offset: BigInt(from), totalBytes: BigInt(sizeBytes), data };
        continue;
      }
      if (!growing) throw new WardenError(Code.DataLoss, `the cached file of sha256 ${sha256} ended at ${String(at)} bytes`);
      if (o.cache.pullingSize(sha256) === undefined && (await file.stat()).size <= at) throw new WardenError(Code.Unavailable, `the pull of sha256 ${sha256} ended at ${String(at)} of ${String(sizeBytes)} bytes`);
      if (o.clock.now() - lastGrowth > o.stallTimeoutMs) throw new WardenError(Code.Unavailable, `the partial of sha256 ${sha256} did not grow for ${String(o.stallTimeoutMs)}ms`);
      await sleep(o.clock, growPollMs, signal);
    }
  } finally {
    // A read still ahead when the stream ends (cancelled, failed) finishes before its file closes.
    await ahead?.catch(() => undefined);
    await file.close();
  }
}
