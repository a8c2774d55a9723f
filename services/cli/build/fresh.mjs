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
// This runs before every `warden` in a checkout, so it loads as little as it can: Node's modules
// through process.getBuiltinModule (an ES module's import of a built-in builds a facade for it,
// milliseconds each), and stamp.mjs (node:crypto) and build.mjs (esbuild) only when needed.
// `process` is the global one for the same reason.
/* global process */
const { readFileSync, statSync } = process.getBuiltinModule("node:fs");
const { rename, writeFile } = process.getBuiltinModule("node:fs/promises");
const { join } = process.getBuiltinModule("node:path");
const { fileURLToPath } = process.getBuiltinModule("node:url");

// The same paths as stamp.mjs's (which loads node:crypto, needed only to hash a changed file).
const repoRoot = join(fileURLToPath(import.meta.url), "..", "..", "..", "..");
const stampFile = join(repoRoot, "services", "cli", "dist", "build-stamp.json");

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
    const { fingerprint } = await import("./stamp.mjs");
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
  const { build } = await import("./build.mjs");
  const r = await build();
  if (options.quiet !== true) process.stderr.write(`warden: rebuilt services/cli/dist in ${String(r.ms)} ms (changed: ${shown})\n`);
}

if (process.argv[1] !== undefined && process.argv[1].endsWith("fresh.mjs")) await ensureFreshBuild();
