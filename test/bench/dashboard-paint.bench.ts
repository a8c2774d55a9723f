/**
 * The dashboard's first paint with 100 nodes and 1 000 instances, from a
 * cold cache (a fresh browser context each time), in Debian's headless
 * Chromium against a real coordinator process (test/support/first-paint-rig.ts;
 * test/dashboard-first-paint.test.ts checks what is painted). Ours: from the
 * navigation to the first window of node cards rendered from the first
 * snapshot. Baseline, the same navigations: to the page's event stream
 * being open (the shell loaded, its script run, whoami answered), i.e. the
 * page without the cluster's state. The ratio is what 1 000 instances add.
 * Median of 7.
 */
import { median, type BenchResult } from "./bench-result.js";
import { domDeadlineMs } from "../support/dashboard-flow.js";
import { paintNodes, startFirstPaintRig } from "../support/first-paint-rig.js";

const runs = 7;

export async function run(): Promise<BenchResult[]> {
  const rig = await startFirstPaintRig();
  try {
    const live: number[] = [];
    const painted: number[] = [];
    for (let i = 0; i < runs; i++) {
      const context = await rig.browser.newContext({ viewport: { width: 1360, height: 860 } });
      try {
        const page = await context.newPage();
        const t0 = performance.now();
        const at = (selector: string): Promise<number> => page.waitForSelector(selector, { timeout: domDeadlineMs, state: "attached" }).then(() => performance.now() - t0);
        const [l, p] = await Promise.all([at('#conn[data-state="live"]'), at(`#page-info[data-matching="${String(paintNodes)}"]`), page.goto(rig.url, { waitUntil: "commit" })]);
        live.push(l);
        painted.push(p);
      } finally {
        await context.close();
      }
    }
    process.stderr.write(`first paint, 100 nodes / 1 000 instances: painted ${painted.map((x) => x.toFixed(0)).join(", ")} ms; live ${live.map((x) => x.toFixed(0)).join(", ")} ms\n`);
    return [{ name: "dashboard first paint, cold cache, 100 nodes / 1 000 instances (median of 7)", baseline: "the same page's stream open, before its first snapshot", ours: median(painted), baselineValue: median(live), unit: "ms", higherIsBetter: false }];
  } finally {
    await rig.close();
  }
}
