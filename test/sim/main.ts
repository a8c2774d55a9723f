import { runSeed } from "./run/run-seed.js";

const seed = Number(process.argv[2] ?? "1");
const t0 = performance.now();
const r = await runSeed(seed, { keepTrace: false });
const wallMs = performance.now() - t0;
console.log(JSON.stringify({ seed, violations: r.violations, simulatedMin: r.simulatedMs / 60000, steps: r.steps, wallMs, hash: r.traceHash, coverage: r.coverage }, null, 1));
