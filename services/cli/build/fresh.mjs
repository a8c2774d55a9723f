// @ts-check
/**
 * Keeps a stale build from running by mistake in a checkout: compares every
 * input recorded in dist/build-stamp.json with the file on disk (size and
 * mtime first — a stat each, a few milliseconds for the whole tree — and the
 * content hash only for files whose stat changed, so a `git checkout` that
 * touched files without changing them costs one hash and no rebuild) and
 * rebuilds when anything differs. An installed package has no build/ and
 * never runs this.
 */
import { readFileSync, statSync } from "node:fs";
import { rename, writeFile } from "node:fs/promises";
import process from "node:process";
import { join } from "node:path";
import { build, fingerprint, repoRoot, stampFile } from "./build.mjs";

/**
 * The inputs that changed since the last build ([] when current).
 * @returns {Promise<string[]>}
 */
export async function staleInputs() {
  /** @type {{ node: string; inputs: Record<string, { size: number; mtimeMs: number; sha1: string }> }} */
  let stamp;
  try {
    stamp = JSON.parse(readFileSync(stampFile, "utf8"));
  } catch {
    return ["(no build yet)"];
  }
  /** @type {string[]} */
  const stale = [];
  let touched = false;
  // Synchronous stats: ~150 of them take a millisecond or two, less than the promise machinery would.
  for (const [p, was] of Object.entries(stamp.inputs)) {
    const path = join(repoRoot, p);
    const s = statSync(path, { throwIfNoEntry: false });
    if (s === undefined) {
      stale.push(p);
      continue;
    }
    if (s.size === was.size && s.mtimeMs === was.mtimeMs) continue;
    const now = await fingerprint(path);
    if (now.sha1 !== was.sha1) {
      stale.push(p);
      continue;
    }
    stamp.inputs[p] = now;
    touched = true;
  }
  if (stale.length === 0 && touched) {
    // Same content, new mtimes: remember them so the next check is stat-only again.
    const tmp = `${stampFile}.${String(process.pid)}.tmp`;
    await writeFile(tmp, `${JSON.stringify(stamp, null, 1)}\n`);
    await rename(tmp, stampFile);
  }
  return stale.sort();
}

/**
 * Rebuilds when the build is missing or stale, saying so on stderr.
 * @param {{ quiet?: boolean }} [options]
 * @returns {Promise<void>}
 */
export async function ensureFreshBuild(options = {}) {
  const stale = await staleInputs();
  if (stale.length === 0) return;
  const shown = stale.slice(0, 3).join(", ") + (stale.length > 3 ? ` and ${String(stale.length - 3)} more` : "");
  const r = await build();
  if (options.quiet !== true) process.stderr.write(`warden: rebuilt services/cli/dist in ${String(r.ms)} ms (changed: ${shown})\n`);
}

if (process.argv[1] !== undefined && process.argv[1].endsWith("fresh.mjs")) await ensureFreshBuild();
