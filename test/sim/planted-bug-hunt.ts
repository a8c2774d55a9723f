/**
 * Finds, for planted bugs, the first seed of a range that catches each one
 * ("test the tester"): `node --import tsx test/sim/planted-bug-hunt.ts
 * [--bugs a,b] [--from 1] [--to 1000] [--minutes M] [--quiesce M]
 * [--policy JSON] [--replicas on|off] [--ha on|off] [--ha-world JSON] [--later-faults on|off] [--dup-window-ms N] [--outage on|off]` (the policy replaces the
 * seed's; `--replicas` forces the replica profile on or off for every seed; `--later-faults off` hunts as the bugs
 * recorded before the later faults run; `--outage off` as those recorded before serving through an agent outage). Prints
 * one JSON line per bug: the catching seed, how many seeds it took, the
 * invariant and message, and whether the same seed is clean without the bug.
 * A tool for recording the seeds in planted-bugs.heavy.test.ts.
 */
import { plantedBugNames } from "@warden/common/testing/planted-bugs";
import type { PolicyPatch } from "@warden/watchdog";
import { huntPlantedBug } from "./planted-bug-runs.js";
import type { HaWorld } from "./ha/ha-profile.js";

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? undefined : process.argv[i + 1];
}

const bugs = arg("bugs")?.split(",") ?? [...plantedBugNames];
const from = Number(arg("from") ?? "1");
const to = Number(arg("to") ?? "1000");
const minutes = arg("minutes");
const quiesce = arg("quiesce");
const policy = arg("policy");
const replicas = arg("replicas");
const ha = arg("ha");
const haWorld = arg("ha-world");
const laterFaults = arg("later-faults");
const dupWindowMs = arg("dup-window-ms");
const outage = arg("outage");
const overrides = {
  ...(dupWindowMs === undefined ? {} : { natsDupWindowMs: Number(dupWindowMs) }),
  ...(haWorld === undefined ? {} : { haWorld: JSON.parse(haWorld) as Partial<HaWorld> }),
  ...(policy === undefined ? {} : { policy: JSON.parse(policy) as PolicyPatch }),
  ...(minutes === undefined ? {} : { durationMs: Number(minutes) * 60_000 }),
  ...(quiesce === undefined ? {} : { quiesceMs: Number(quiesce) * 60_000 }),
  ...(replicas === undefined ? {} : { replicaProfile: replicas === "on" }),
  ...(ha === undefined ? {} : { haProfile: ha === "on" }),
  ...(laterFaults === undefined ? {} : { laterFaults: laterFaults === "on" }),
  ...(outage === undefined ? {} : { outageServing: outage === "on" }),
};
for (const bug of bugs) {
  const t0 = performance.now();
  const r = await huntPlantedBug(bug, from, to, overrides);
  console.log(JSON.stringify({ bug, ...r, wallMs: Math.round(performance.now() - t0) }));
}
