import { open, realpath } from "node:fs/promises";
import { join, sep } from "node:path";
import { Code, WardenError, abortReason, checkRelativePath } from "@warden/common";
import type { ServiceImpl } from "@warden/grpc";
import type { ArtifactStoreService } from "@warden/proto";
import { checkNodeCertificate } from "../auth/node-certificate-check.js";

/** Longest store path a ReadArtifact may name. */
export const maxStorePathChars = 1024;
/** Bytes per ReadArtifactResponse. */
export const storeChunkBytes = 1 << 20;

function inside(root: string, path: string): boolean {
  return path === root || path.startsWith(root.endsWith(sep) ? root : root + sep);
}

/**
 * ArtifactStoreService: the coordinator's `artifactStore` directory, read by agents
 * from an offset (a resumed pull). Served on the port agents register on, to
 * node credentials only: the node token bound to `node_id` (the guard, as for
 * NodeService) and, with mutual TLS, a certificate naming that node. A path
 * with a ".." segment, a leading "/" or a control character is
 * INVALID_ARGUMENT; one that leads outside the directory through a symlink is
 * PERMISSION_DENIED; a missing file or a directory is NOT_FOUND; an offset
 * past the end is OUT_OF_RANGE.
 */
export function artifactStoreService(root: string | undefined, o: { readonly mutual: boolean }): ServiceImpl<typeof ArtifactStoreService> {
  return {
    async *readArtifact(req, ctx) {
      if (o.mutual) checkNodeCertificate(req.nodeId, ctx);
      if (root === undefined) throw new WardenError(Code.FailedPrecondition, "this coordinator has no artifact store (set artifactStore in its config)");
      const rel = checkRelativePath("path", req.path, maxStorePathChars);
      let realRoot: string;
      let real: string;
      try {
        realRoot = await realpath(root);
      } catch (err) {
        throw new WardenError(Code.FailedPrecondition, `the artifact store ${root} is not readable: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
      }
      try {
        real = await realpath(join(realRoot, rel));
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === "ENOENT" || code === "ENOTDIR") throw new WardenError(Code.NotFound, `path: the artifact store has no ${JSON.stringify(rel)}`, { details: { field: "path" } });
        throw new WardenError(Code.Unavailable, `path: cannot resolve ${JSON.stringify(rel)}: ${code ?? String(err)}`);
      }
      if (!inside(realRoot, real)) throw new WardenError(Code.PermissionDenied, `path: ${JSON.stringify(rel)} leads outside the artifact store`, { details: { field: "path" } });
      const file = await open(real, "r");
      try {
        const st = await file.stat();
        if (!st.isFile()) throw new WardenError(Code.NotFound, `path: ${JSON.stringify(rel)} is not a file`, { details: { field: "path" } });
        const total = st.size;
        const offset = req.offset;
        if (offset > BigInt(total)) throw new WardenError(Code.OutOfRange, `offset: ${String(offset)} is past the file's ${String(total)} bytes`, { details: { field: "offset" } });
        let at = Number(offset);
        const totalBytes = BigInt(total);
        // Always one chunk, even at the end: it tells the reader the size and that the offset was honoured.
        let sentOne = false;
        while (at < total || !sentOne) {
          if (ctx.signal.aborted) throw abortReason(ctx.signal);
          const buf = Buffer.allocUnsafe(Math.min(storeChunkBytes, total - at));
          const { bytesRead } = buf.length === 0 ? { bytesRead: 0 } : await file.read(buf, 0, buf.length, at);
          if (buf.length > 0 && bytesRead === 0) break; // truncated while read: the reader sees a short file
          yield { offset: BigInt(at), totalBytes, data: buf.subarray(0, bytesRead) };
          at += bytesRead;
          sentOne = true;
        }
      } finally {
        await file.close();
      }
    },
  };
}

