/**
 * The dashboard's first paint with 100 nodes and 1 000 instances, from a
 * cold cache (a fresh browser context each time), in Debian's headless
 * Chromium against a real coordinator process (test/support/first-paint-rig.ts;
 * test/dashboard-first-paint.test.ts checks what is painted): from the
 * navigation to the first window of node cards rendered from the first
 * snapshot, on the machine's clock around Playwright's calls. Baseline, in
 * the same run: the same page and measure against a coordinator holding one
 * node of ten instances. The ratio is what the cluster's size adds. Median of 7.
 */
import { median, type BenchResult } from "./bench-result.js";
import { domDeadlineMs } from "../support/dashboard-flow.js";
import { paintNodes, startFirstPaintRig } from "../support/first-paint-rig.js";

const runs = 7;

async function paintTimesMs(nodes: number): Promise<number[]> {
  const rig = await startFirstPaintRig(nodes);
  try {
    const out: number[] = [];
    for (let i = 0; i < runs; i++) {
      const context = await rig.browser.newContext({ viewport: { width: 1360, height: 860 } });
      try {
        const page = await context.newPage();
        const t0 = performance.now();
        const painted = page.waitForSelector(`#page-info[data-matching="${String(nodes)}"]`, { timeout: domDeadlineMs, state: "attached" }).then(() => performance.now() - t0);
        const [ms] = await Promise.all([painted, page.goto(rig.url, { waitUntil: "commit" })]);
        out.push(ms);
      } finally {
        await context.close();
      }
    }
    process.stderr.write(`first paint, ${String(nodes)} nodes / ${String(nodes * 10)} instances: ${out.map((x) => x.toFixed(0)).join(", ")} ms\n`);
    return out;
  } finally {
    await rig.close();
  }
}

export async function run(): Promise<BenchResult[]> {
  const small = await paintTimesMs(1);
  const large = await paintTimesMs(paintNodes);
  return [{ name: `dashboard first paint, cold cache, ${String(paintNodes)} nodes / ${String(paintNodes * 10)} instances (median of ${String(runs)})`, baseline: "the same with 1 node / 10 instances", ours: median(large), baselineValue: median(small), unit: "ms", higherIsBetter: false }];
}
