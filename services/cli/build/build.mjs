// @ts-check
/**
 * Builds `warden` ahead of time: esbuild bundles the CLI (which carries the
 * coordinator, the agent and the NATS reader as lazily loaded chunks),
 * backend-sim and the dev cluster into services/cli/dist as ES modules with
 * source maps, every npm dependency included, so nothing is transpiled at
 * start and the installed package needs no node_modules.
 *
 * Plain JavaScript on purpose: it runs in `npm ci`'s prepare step and in the
 * freshness check before `npm start`, where a TypeScript loader would cost
 * more than the build itself. Run: `node services/cli/build/build.mjs`.
 */
import { createHash } from "node:crypto";
import { mkdir, readFile, readdir, rename, rm, stat, writeFile } from "node:fs/promises";
import { performance } from "node:perf_hooks";
import process from "node:process";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const distDir = join(repoRoot, "services", "cli", "dist");
export const stampFile = join(distDir, "build-stamp.json");

/** Files whose change must rebuild although esbuild does not list them as inputs. */
const extraInputs = ["package-lock.json", "services/cli/build/build.mjs", "services/cli/package.json"];

const entryPoints = {
  warden: "services/cli/src/main.ts",
  "backend-sim": "services/backend-sim/src/main.ts",
  "dev-cluster": "services/cli/src/dev-cluster.ts",
};

// Bundled CommonJS dependencies (grpc-js, pino, …) call require() for Node's
// built-ins; an ES module has no require, so each output file gets one.
const banner = "import { createRequire as __wardenCreateRequire } from 'node:module';\nconst require = __wardenCreateRequire(import.meta.url);";

/**
 * @param {string} path
 * @returns {Promise<{ size: number; mtimeMs: number; sha1: string }>}
 */
export async function fingerprint(path) {
  const [s, body] = await Promise.all([stat(path), readFile(path)]);
  return { size: s.size, mtimeMs: s.mtimeMs, sha1: createHash("sha1").update(body).digest("hex") };
}

export const licensesFile = "THIRD-PARTY-LICENSES.txt";

/**
 * The license text of every npm package the bundle carries (the bundle is
 * distributed on its own, so their notices travel with it).
 * @param {string[]} inputs esbuild's input paths, relative to the repository
 * @returns {Promise<string>}
 */
async function thirdPartyLicenses(inputs) {
  /** @type {Set<string>} */
  const dirs = new Set();
  for (const p of inputs) {
    const m = /^(.*node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(p);
    if (m?.[1] !== undefined) dirs.add(m[1]);
  }
  const parts = [];
  for (const d of [...dirs].sort()) {
    const pkg = JSON.parse(await readFile(join(repoRoot, d, "package.json"), "utf8"));
    const names = (await readdir(join(repoRoot, d))).filter((f) => /^(licen[cs]e|copying|notice)/i.test(f)).sort();
    const texts = await Promise.all(names.map((f) => readFile(join(repoRoot, d, f), "utf8")));
    parts.push(`${"=".repeat(78)}\n${String(pkg.name)}@${String(pkg.version)} (${String(pkg.license ?? "see text")})\n${"=".repeat(78)}\n${texts.join("\n").trim() || "(no license file shipped; license field above)"}\n`);
  }
  return `Third-party software bundled into warden's dist/ files:\n\n${parts.join("\n")}`;
}

/**
 * Bundles into dist/ and records every source input's fingerprint in
 * build-stamp.json (written last: a build that failed half-way is stale).
 * @returns {Promise<{ ms: number; files: number }>}
 */
export async function build() {
  const t0 = performance.now();
  const esbuild = await import("esbuild");
  const result = await esbuild.build({
    absWorkingDir: repoRoot,
    entryPoints,
    outdir: distDir,
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "node",
    target: "node20.19",
    sourcemap: "linked",
    sourcesContent: false,
    // Smaller files parse faster: a third off a short command's start (the maps restore names in traces).
    minify: true,
    metafile: true,
    write: false,
    banner: { js: banner },
    logLevel: "warning",
    // Chunk names carry a content hash, so an old entry never loads a new chunk.
    chunkNames: "chunk-[hash]",
  });
  await mkdir(distDir, { recursive: true });
  const written = new Set(["build-stamp.json"]);
  for (const f of result.outputFiles) {
    // Each file replaced by rename: a process starting meanwhile reads a whole old or a whole new file.
    const tmp = `${f.path}.${String(process.pid)}.tmp`;
    await writeFile(tmp, f.contents);
    await rename(tmp, f.path);
    written.add(relative(distDir, f.path));
  }
  const all = Object.keys(result.metafile.inputs);
  await writeFile(join(distDir, licensesFile), await thirdPartyLicenses(all));
  written.add(licensesFile);
  for (const e of await readdir(distDir)) if (!written.has(e)) await rm(join(distDir, e), { force: true, recursive: true });

  const inputs = all.filter((p) => !p.includes("node_modules/") && !p.startsWith("<"));
  /** @type {Record<string, { size: number; mtimeMs: number; sha1: string }>} */
  const stamp = {};
  for (const p of [...inputs, ...extraInputs].sort()) stamp[p] = await fingerprint(join(repoRoot, p));
  const tmp = `${stampFile}.${String(process.pid)}.tmp`;
  await writeFile(tmp, `${JSON.stringify({ node: process.version, inputs: stamp }, null, 1)}\n`);
  await rename(tmp, stampFile);
  return { ms: Math.round(performance.now() - t0), files: result.outputFiles.length };
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const r = await build();
  process.stdout.write(`warden: built services/cli/dist (${String(r.files)} files) in ${String(r.ms)} ms\n`);
}
