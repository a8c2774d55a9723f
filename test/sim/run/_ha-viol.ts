import { runSeed } from "./run-seed.js";
const seeds = process.argv.slice(2).map(Number);
for (const s of seeds) {
  const r = await runSeed(s, {});
  for (const v of r.violations.slice(0, 2)) console.log(`${String(s)} @${String(Math.round(v.atMs))} [${v.invariant}] ${v.message.slice(0, 300)}`);
}
