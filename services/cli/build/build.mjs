// @ts-check
/**
 * Builds `warden` ahead of time: esbuild bundles the CLI (which carries the
 * coordinator, the agent and the NATS reader as lazily loaded chunks),
 * backend-sim and the dev cluster into services/cli/dist as ES modules with
 * source maps, every npm dependency included, so nothing is transpiled at
 * start and the installed package needs no node_modules; and the command line
 * with the admin commands once more as CommonJS files (warden-cli*.cjs),
 * which the bin runs with a V8 code cache.
 *
 * Plain JavaScript on purpose: it runs in `npm ci`'s prepare step and in the
 * freshness check before `npm start`, where a TypeScript loader would cost
 * more than the build itself. Run: `node services/cli/build/build.mjs`.
 */
import { mkdir, readFile, readdir, rename, rm, writeFile } from "node:fs/promises";
import { performance } from "node:perf_hooks";
import process from "node:process";
import { join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { distDir, fingerprint, repoRoot, stampFile } from "./stamp.mjs";
import { buildDashboardClient } from "../../coordinator/src/http/dashboard/client/build-client.mjs";

export { distDir, fingerprint, repoRoot, stampFile };

/** Files whose change must rebuild although esbuild does not list them as inputs. */
const extraInputs = ["package-lock.json", "services/cli/build/build.mjs", "services/cli/build/stamp.mjs", "services/cli/package.json", "services/coordinator/src/http/dashboard/client/build-client.mjs"];

const entryPoints = {
  // dist/warden.js: `warden` as an ES module (dev-cluster runs it); the bin runs warden-cli.cjs below.
  warden: "services/cli/src/main.ts",
  // The long-running commands, which the bin's CommonJS bundle loads only when one is run.
  runners: "services/cli/src/runners.ts",
  "backend-sim": "services/backend-sim/src/main.ts",
  "dev-cluster": "services/cli/src/dev-cluster.ts",
};

/** The bin's CommonJS files (dist/warden-cli*.cjs); services/cli/bin/warden.js names them too. */
const frontName = "warden-cli";

// Bundled CommonJS dependencies (grpc-js, pino, …) call require() for Node's
// built-ins; an ES module has no require, so each output file gets one.
const banner = "import { createRequire as __wardenCreateRequire } from 'node:module';\nconst require = __wardenCreateRequire(import.meta.url);";

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
  // The dashboard's browser script, embedded as a constant (dashboard-client-bundle.ts reads it).
  const dashboard = await buildDashboardClient(esbuild, repoRoot);
  // Both builds: bundled, split ES modules for Node 20, minified (smaller files parse faster:
  // a third off a short command's start), kept in memory until the stamp is written.
  /** @type {const} */
  const common = { absWorkingDir: repoRoot, outdir: distDir, bundle: true, splitting: true, format: "esm", platform: "node", target: "node20.19", minify: true, metafile: true, write: false, logLevel: "warning", define: { WARDEN_DASHBOARD_CLIENT: JSON.stringify(dashboard.code) } };
  const result = await esbuild.build({
    ...common,
    entryPoints,
    sourcemap: "linked",
    sourcesContent: false,
    banner: { js: banner },
    // Chunk names carry a content hash, so an old entry never loads a new chunk.
    chunkNames: "chunk-[hash]",
  });
  // What the bin runs: the command line and the admin commands, split as ES modules (so an admin
  // command's code and the protobuf schemas load only when one runs, and tree shaking stays exact)
  // and then each file turned into CommonJS, which the bin compiles with a V8 code cache (Node 20
  // caches no ES module's compilation). No source maps: esbuild's transform cannot chain them, and
  // these files print one-line errors; the long-running commands (dist/runners.js) keep theirs.
  const split = await esbuild.build({
    ...common,
    entryPoints: { [frontName]: "services/cli/src/start.ts" },
    chunkNames: `${frontName}-[hash]`,
  });
  const front = [];
  for (const f of split.outputFiles) {
    // dynamic-import off: import() of a chunk becomes require() (a vm.Script has no module loader).
    const cjs = await esbuild.transform(f.text, { format: "cjs", platform: "node", target: "node20.19", minify: true, supported: { "dynamic-import": false }, logLevel: "warning" });
    // Chunks name each other "./x.js"; the bin's loader maps that to x.cjs.
    front.push({ path: f.path.replace(/\.js$/, ".cjs"), contents: cjs.code });
  }
  await mkdir(distDir, { recursive: true });
  const written = new Set(["build-stamp.json"]);
  for (const f of [...result.outputFiles, ...front]) {
    // Each file replaced by rename: a process starting meanwhile reads a whole old or a whole new file.
    const tmp = `${f.path}.${String(process.pid)}.tmp`;
    await writeFile(tmp, f.contents);
    await rename(tmp, f.path);
    written.add(relative(distDir, f.path));
  }
  const all = [...new Set([...Object.keys(result.metafile.inputs), ...Object.keys(split.metafile.inputs), ...dashboard.inputs])];
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
  return { ms: Math.round(performance.now() - t0), files: result.outputFiles.length + front.length };
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const r = await build();
  process.stdout.write(`warden: built services/cli/dist (${String(r.files)} files) in ${String(r.ms)} ms\n`);
}
