import { requiredCoverage } from "../check/coverage.js";
import { describeStep } from "./plan.js";
import { runCampaign } from "./campaign.js";
import { runSeed } from "./run-seed.js";
import { shrinkSeed } from "./shrink.js";
import { allFaultTypes, optionsForSeed, type SimOptions, type SimProfile } from "./sim-options.js";
import type { HaWorld } from "../ha/ha-profile.js";

/**
 * `npm run sim -- --seeds N [--first F] [--long]`: a campaign on 2 worker threads.
 * `npm run sim -- --seed S [--long]`: replays one seed and prints its trace.
 * `--long` runs the long profile (45 simulated minutes per seed) instead of the short one.
 * `--replicas on|off` forces the replica profile on or off for every seed (default: drawn per seed);
 * `--ha on|off` forces the HA profile (two coordinators, lease, fencing) on or off the same way;
 * `--ha-world JSON` replaces parts of the HA world's realism, e.g. `{"journalResends":false}` (ha/ha-profile.ts HaWorld);
 * `--workers N` sets the campaign's worker threads (default 2).
 */
function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
}

const profile: SimProfile = process.argv.includes("--long") ? "long" : "short";
const replicasArg = arg("--replicas");
const haArg = arg("--ha");
const haWorldArg = arg("--ha-world");
const overrides: Partial<SimOptions> = {
  ...(replicasArg === undefined ? {} : { replicaProfile: replicasArg === "on" }),
  ...(haArg === undefined ? {} : { haProfile: haArg === "on" }),
  ...(haWorldArg === undefined ? {} : { haWorld: JSON.parse(haWorldArg) as Partial<HaWorld> }),
};
const flag = `${profile === "long" ? " --long" : ""}${replicasArg === undefined ? "" : ` --replicas ${replicasArg}`}${haArg === undefined ? "" : ` --ha ${haArg}`}${haWorldArg === undefined ? "" : ` --ha-world '${haWorldArg}'`}`;
const one = arg("--seed");
if (one !== undefined) {
  const seed = Number(one);
  const t0 = performance.now();
  const r = await runSeed(seed, { keepTrace: true, profile, overrides });
  const wallMs = performance.now() - t0;
  for (const line of r.trace) console.log(line);
  console.log(JSON.stringify(optionsForSeed(seed, overrides, profile), (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v)));
  console.log(`seed ${String(seed)} (${profile}): simulated ${(r.simulatedMs / 60_000).toFixed(1)} min, ${String(r.steps)} steps in ${(wallMs / 1000).toFixed(1)} s, trace hash ${r.traceHash.toString(16)}`);
  for (const v of r.violations) console.log(`VIOLATION [${v.invariant}] at ${String(v.atMs)}ms: ${v.message}`);
  console.log(`violations: ${String(r.violations.length)}`);
  process.exitCode = r.violations.length > 0 ? 1 : 0;
} else {
  const count = Number(arg("--seeds") ?? "100");
  const first = Number(arg("--first") ?? "1");
  const r = await runCampaign(
    first,
    count,
    Number(arg("--workers") ?? "2"),
    (p) => {
      if (p.done % 1000 !== 0) return;
      const failing = p.failures.length === 0 ? "" : ` (seeds ${p.failures.slice(0, 10).map((f) => String(f.seed)).join(", ")}${p.failures.length > 10 ? ", ..." : ""})`;
      process.stderr.write(`  ${String(p.done)}/${String(count)} seeds, ${(p.simulatedMs / 3_600_000).toFixed(1)} simulated hours in ${(p.wallMs / 1000).toFixed(0)} s, violations so far: ${String(p.failures.length)}${failing}\n`);
    },
    profile,
    overrides,
  );
  const hours = r.simulatedMs / 3_600_000;
  console.log(`seeds: ${String(r.seeds)} (${String(first)}..${String(first + count - 1)}, ${profile} profile${replicasArg === undefined ? "" : `, replicas ${replicasArg}`}${haArg === undefined ? "" : `, ha ${haArg}`})`);
  console.log(`simulated hours: ${hours.toFixed(1)}   wall: ${(r.wallMs / 1000).toFixed(1)} s   simulated hours per wall second: ${(hours / (r.wallMs / 1000)).toFixed(2)}   simulated/wall: ${(r.simulatedMs / r.wallMs).toFixed(0)}x   steps: ${String(r.steps)}`);
  console.log("faults injected per type:");
  for (const f of allFaultTypes) console.log(`  ${f}: ${String(r.coverage.get(`fault.${f}`) ?? 0)}`);
  console.log("coverage:");
  for (const [k, v] of [...r.coverage.entries()].sort()) if (!k.startsWith("fault.")) console.log(`  ${k}: ${String(v)}`);
  const never = requiredCoverage.filter((k) => (r.coverage.get(k) ?? 0) === 0);
  const neverFaults = allFaultTypes.filter((f) => (r.coverage.get(`fault.${f}`) ?? 0) === 0);
  if (never.length > 0) console.log(`coverage never reached: ${never.join(", ")}`);
  if (neverFaults.length > 0) console.log(`fault types never injected: ${neverFaults.join(", ")}`);
  console.log(`violations: ${String(r.failures.length)}`);
  for (const f of r.failures.slice(0, 100)) console.log(`  seed ${String(f.seed)}: [${f.violations[0]?.invariant ?? ""}] ${f.violations[0]?.message.slice(0, 160) ?? ""}`);
  // Shrinking re-runs the seed (up to 40 times each): only the first few failures, so the report stays quick.
  for (const [i, f] of r.failures.slice(0, 10).entries()) {
    const v = f.violations[0];
    console.log(`\nseed ${String(f.seed)}: [${v?.invariant ?? ""}] ${v?.message ?? ""}`);
    console.log(`  replay: npm run sim -- --seed ${String(f.seed)}${flag}`);
    if (v !== undefined && i < 3) {
      const t0 = performance.now();
      const plan = await shrinkSeed(f.seed, v.invariant, profile === "long" ? 12 : 40, profile, overrides);
      console.log(`  shrunk trace (${String(plan.length)} steps, ${((performance.now() - t0) / 1000).toFixed(1)} s):`);
      for (const s of plan.slice(0, 40)) console.log(`    ${describeStep(s)}`);
    }
  }
  process.exitCode = r.failures.length > 0 || never.length > 0 || neverFaults.length > 0 ? 1 : 0;
}
