/**
 * Fails when the committed generated code differs from what `buf generate`
 * produces from proto/ now: regenerates into a temp dir and compares files.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";

const root = resolve(import.meta.dirname, "..");
const committed = join(root, "packages", "proto", "src", "gen");
const out = mkdtempSync(join(tmpdir(), "warden-proto-"));
const template = JSON.stringify({
  version: "v2",
  inputs: [{ directory: "proto" }],
  plugins: [{ local: "node_modules/.bin/protoc-gen-es", out, include_imports: false, opt: ["target=ts", "import_extension=js"] }],
});
const r = spawnSync(join(root, "node_modules", ".bin", "buf"), ["generate", "--template", template], { cwd: root, stdio: "inherit" });
if (r.status !== 0) {
  console.error("buf generate failed");
  process.exit(1);
}

function files(dir: string, base = dir, acc: string[] = []): string[] {
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) files(p, base, acc);
    else acc.push(relative(base, p));
  }
  return acc.sort();
}

const a = files(committed);
const b = files(out);
const problems: string[] = [];
for (const f of new Set([...a, ...b])) {
  if (!a.includes(f)) problems.push(`missing from packages/proto/src/gen: ${f}`);
  else if (!b.includes(f)) problems.push(`stale file in packages/proto/src/gen: ${f}`);
  else if (readFileSync(join(committed, f), "utf8") !== readFileSync(join(out, f), "utf8")) problems.push(`differs from proto/: ${f}`);
}
rmSync(out, { recursive: true, force: true });
if (problems.length > 0) {
  console.error("Generated code is out of date; run `npm run proto:generate` and commit:\n  " + problems.join("\n  "));
  process.exit(1);
}
console.log(`generated code up to date (${String(a.length)} files)`);
