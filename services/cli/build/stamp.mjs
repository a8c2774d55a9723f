// @ts-check
/**
 * Where the build lives and how an input is fingerprinted: shared by build.mjs
 * and by fresh.mjs, which runs before every `warden` in a checkout and so must
 * not load the build (or esbuild) unless it has to rebuild.
 */
import { readFile, stat } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const distDir = join(repoRoot, "services", "cli", "dist");
export const stampFile = join(distDir, "build-stamp.json");

/**
 * @param {string} path
 * @returns {Promise<{ size: number; mtimeMs: number; sha1: string }>}
 */
export async function fingerprint(path) {
  // node:crypto only here: the freshness check that runs before every `warden` hashes nothing
  // unless a file's size or mtime changed, and loading crypto would cost it several milliseconds.
  const { createHash } = await import("node:crypto");
  const [s, body] = await Promise.all([stat(path), readFile(path)]);
  return { size: s.size, mtimeMs: s.mtimeMs, sha1: createHash("sha1").update(body).digest("hex") };
}
