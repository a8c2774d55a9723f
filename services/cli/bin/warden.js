#!/usr/bin/env node
// The `warden` command: runs the ahead-of-time build in ../dist (no TypeScript
// loader). In a checkout (../build exists) it first makes sure that build is
// current, rebuilding it if a source changed; an installed package has no
// ../build and goes straight to the bundle.
//
// The command line and the admin commands are CommonJS files (dist/warden-cli*.cjs:
// the entry and the chunks it loads on demand) compiled here with a V8 code
// cache beside each (.v8cache), the v8-compile-cache technique: Node 20 caches
// no ES module's compilation, and compiling the bundle was a large part of a
// short command. A cache starts with the line "size:mtimeMs:inode" of the file
// it was made from (every build replaces a file by rename, so a new build never
// matches an old cache; V8 itself checks only the source's length) and V8
// validates the rest (its version and flags); one that does not match is
// ignored and rewritten. A cache is written after a run that had none or had
// it rejected, atomically (temporary file and rename); where dist/ is
// read-only the command runs without one.
//
// Node's modules through process.getBuiltinModule, not `import`: an ES module's
// import of a built-in builds a module facade for it, several milliseconds each.
const { existsSync, readFileSync, renameSync, statSync, writeFileSync } = process.getBuiltinModule("node:fs");
const { createRequire } = process.getBuiltinModule("node:module");
const { join } = process.getBuiltinModule("node:path");
const { fileURLToPath } = process.getBuiltinModule("node:url");
const { Script } = process.getBuiltinModule("node:vm");

const fresh = new URL("../build/fresh.mjs", import.meta.url);
if (existsSync(fresh)) {
  const { ensureFreshBuild } = await import(fresh.href);
  await ensureFreshBuild();
}

const dist = fileURLToPath(new URL("../dist/", import.meta.url));
const nodeRequire = createRequire(join(dist, "warden-cli.cjs"));
/** @type {Map<string, { exports: any; script: Script; file: string; key: string; cached: Buffer | undefined }>} */
const loaded = new Map();

/**
 * commander requires node:child_process as it loads, for executable subcommands
 * (warden has none): loading it, with net and dgram, was ~15 ms of `warden --help`.
 * Such a built-in is handed over as a stand-in that loads it on first use.
 */
const onFirstUse = new Set(["node:child_process"]);
function builtin(id) {
  if (!onFirstUse.has(id)) return nodeRequire(id);
  let real;
  return new Proxy({}, { get: (_, key) => (real ??= nodeRequire(id))[key] });
}

/** Loads dist/<name>.cjs once, as Node's CommonJS loader would, compiling it with its cache. */
function load(name) {
  const known = loaded.get(name);
  if (known !== undefined) return known.exports;
  const file = join(dist, `${name}.cjs`);
  const source = readFileSync(file, "utf8");
  const s = statSync(file);
  const key = `${String(s.size)}:${String(s.mtimeMs)}:${String(s.ino)}\n`;
  let cached;
  try {
    const c = readFileSync(`${file}.v8cache`);
    if (c.subarray(0, key.length).toString("latin1") === key) cached = c.subarray(key.length);
  } catch {
    // no cache yet
  }
  const script = new Script(`(function (exports, require, module, __filename, __dirname) {${source}\n})`, { filename: file, cachedData: cached });
  const module = { exports: {}, script, file, key, cached };
  loaded.set(name, module);
  // The chunks name each other "./<name>.js" (esbuild's split ES modules, turned into CommonJS).
  const require = (id) => (id.startsWith("./") ? load(id.slice(2).replace(/\.js$/, "")) : builtin(id));
  script.runInThisContext().call(module.exports, module.exports, require, module, file, dist);
  return module.exports;
}

/**
 * After the command, so a new cache holds every function this run compiled, not
 * only the top level. Only where there was none or V8 rejected it: comparing
 * with a fresh one would cost every run the serialisation.
 */
function saveCaches() {
  for (const m of loaded.values()) if (m.cached === undefined || m.script.cachedDataRejected === true) write(m, m.script.createCachedData());
}

function write(m, data) {
  const tmp = `${m.file}.v8cache.${String(process.pid)}.tmp`;
  try {
    writeFileSync(tmp, Buffer.concat([Buffer.from(m.key, "latin1"), data]));
    renameSync(tmp, `${m.file}.v8cache`);
  } catch {
    // a read-only install: run without a cache
  }
}

// Source maps are enabled by the long-running commands only (services/cli/src/start.ts):
// Node parses each loaded file's map when they are on, which would double a short command's time.
const code = await load("warden-cli").startWarden(process.argv.slice(2), () => import(new URL("../dist/runners.js", import.meta.url).href));
saveCaches();
process.exit(code);
