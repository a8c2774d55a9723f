/**
 * The one test command (`npm test`): the build, typecheck, lint, buf lint,
 * generated-code drift, then vitest — the ordinary project first, the heavy property /
 * simulation project after it so they do not compete for the two cores — and
 * finally one plain line `N passed, N failed` computed from vitest's JSON
 * reports. A failed static check counts as one failed test. Fails if a test
 * file present in the tree was not run.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";

const root = resolve(import.meta.dirname, "..");
const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: "1", FORCE_COLOR: "0" };
const bin = (name: string): string => join(root, "node_modules", ".bin", name);

let passed = 0;
let failed = 0;
const failures: string[] = [];

function step(name: string, cmd: string, args: string[]): boolean {
  process.stdout.write(`\n=== ${name}: ${[cmd, ...args].map((a) => relative(root, a) || a).join(" ")}\n`);
  const r = spawnSync(cmd, args, { cwd: root, env, stdio: "inherit" });
  const ok = r.status === 0;
  if (!ok) {
    failures.push(name);
    failed++;
  }
  return ok;
}

function walk(dir: string, out: string[]): void {
  for (const e of readdirSync(dir)) {
    if (e === "node_modules" || e.startsWith(".")) continue;
    const p = join(dir, e);
    if (statSync(p).isDirectory()) walk(p, out);
    else if (e.endsWith(".test.ts")) out.push(p);
  }
}

function testFilesInTree(): string[] {
  const out: string[] = [];
  for (const top of ["packages", "services"]) {
    for (const pkg of readdirSync(join(root, top))) {
      const src = join(root, top, pkg, "src");
      try {
        if (statSync(src).isDirectory()) walk(src, out);
      } catch {
        // package without src
      }
    }
  }
  walk(join(root, "test"), out);
  return out.sort();
}

interface VitestReport {
  numPassedTests: number;
  numFailedTests: number;
  numPendingTests: number;
  numTodoTests: number;
  testResults: { name: string; status: string; message?: string; startTime?: number; endTime?: number }[];
}

/** Wall time per test file (both projects), for the slowest-files list that keeps the suite's budget visible. */
const fileMs: { name: string; ms: number }[] = [];

const onlyVitest = process.argv.includes("--vitest-only");
// Build first: the tests of the built CLI and of the installable tarball run
// what `npm ci` and `npm start` would, so a stale dist can never pass for current.
const built = step("build", process.execPath, [join(root, "services", "cli", "build", "build.mjs")]);
// Backends run from the bundle just built rather than through tsx (about a second of
// CPU less per backend start; the suite starts hundreds): see backend-sim-catalog.ts.
if (built) env["WARDEN_BACKEND_SIM_BUNDLE"] = join(root, "services", "cli", "dist", "backend-sim.js");
if (!onlyVitest) {
  step("typecheck", bin("tsc"), ["-p", "tsconfig.json"]);
  step("typecheck (dashboard browser client)", bin("tsc"), ["-p", "services/coordinator/src/http/dashboard/client/tsconfig.json"]);
  step("lint", bin("eslint"), ["--max-warnings", "0", "."]);
  step("buf lint", bin("buf"), ["lint"]);
  step("proto drift", process.execPath, ["--import", "tsx", join(root, "test", "proto-drift.ts")]);
}

const work = mkdtempSync(join(tmpdir(), "warden-test-"));
const ran = new Set<string>();
for (const project of ["main", "heavy"]) {
  const report = join(work, `${project}.json`);
  process.stdout.write(`\n=== vitest project ${project}\n`);
  const r = spawnSync(bin("vitest"), ["run", "--project", project, "--reporter=default", "--reporter=json", `--outputFile.json=${report}`, "--passWithNoTests"], { cwd: root, env, stdio: "inherit" });
  let json: VitestReport;
  try {
    json = JSON.parse(readFileSync(report, "utf8")) as VitestReport;
  } catch {
    failures.push(`vitest ${project}: no JSON report (exit ${String(r.status)})`);
    failed++;
    continue;
  }
  passed += json.numPassedTests;
  failed += json.numFailedTests;
  // Skipped or todo tests are not allowed: count them as failures.
  if (json.numPendingTests + json.numTodoTests > 0) {
    failures.push(`vitest ${project}: ${String(json.numPendingTests + json.numTodoTests)} skipped/todo tests`);
    failed += json.numPendingTests + json.numTodoTests;
  }
  for (const t of json.testResults) {
    ran.add(resolve(t.name));
    if (t.startTime !== undefined && t.endTime !== undefined) fileMs.push({ name: `${project} ${relative(root, t.name)}`, ms: t.endTime - t.startTime });
    // A file that failed to load reports no test; count it.
    if (t.status === "failed" && t.message !== undefined && t.message !== "") {
      failures.push(`${relative(root, t.name)}: ${t.message.split("\n")[0] ?? ""}`);
    }
  }
  if (r.status !== 0 && json.numFailedTests === 0) {
    failures.push(`vitest ${project} exited ${String(r.status)}`);
    failed++;
  }
}
rmSync(work, { recursive: true, force: true });

const notRun = testFilesInTree().filter((f) => !ran.has(f));
for (const f of notRun) {
  failures.push(`test file not run: ${relative(root, f)}`);
  failed++;
}

process.stdout.write("\nSlowest test files:\n" + fileMs.sort((a, b) => b.ms - a.ms).slice(0, 12).map((f) => `  ${(f.ms / 1000).toFixed(1).padStart(6)} s  ${f.name}`).join("\n") + "\n");
if (failures.length > 0) {
  process.stdout.write("\nFailures:\n" + failures.map((f) => `  - ${f}`).join("\n") + "\n");
}
process.stdout.write(`\n${String(passed)} passed, ${String(failed)} failed\n`);
process.exitCode = failed === 0 ? 0 : 1;
