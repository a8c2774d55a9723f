import { writeFileSync } from "node:fs";
import { Code, WardenError, invalidArgument } from "@warden/common";

/** Longest output path TTS and GenerateImage take (Linux PATH_MAX). */
export const simMaxDstBytes = 4096;

/**
 * Writes a generated file at the caller's `dst`, as LocalAI's backends do. A
 * path the file system cannot take is the caller's error, named, never
 * INTERNAL (fuzzing found "\0"): empty, a NUL byte or over simMaxDstBytes is
 * INVALID_ARGUMENT; a write the file system refuses (no such directory, a
 * directory, no permission) FAILED_PRECONDITION naming `dst`.
 */
export function writeDst(dst: string, bytes: Uint8Array): void {
  if (dst === "") throw invalidArgument("dst", "must name the output file");
  if (dst.includes("\0")) throw invalidArgument("dst", "must not contain a NUL byte");
  if (Buffer.byteLength(dst) > simMaxDstBytes) throw invalidArgument("dst", `must be at most ${String(simMaxDstBytes)} bytes`);
  try {
    writeFileSync(dst, bytes);
  } catch (err) {
    throw new WardenError(Code.FailedPrecondition, `dst: cannot write ${JSON.stringify(dst)}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`, { details: { field: "dst" } });
  }
}
