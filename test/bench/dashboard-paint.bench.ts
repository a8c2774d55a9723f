/**
 * The dashboard's first paint with 100 nodes and 1 000 instances, from a
 * cold cache (a fresh browser context each time), in Debian's headless
 * Chromium against a real coordinator process (test/support/first-paint-rig.ts;
 * test/dashboard-first-paint.test.ts checks what is painted). Two figures a
 * run: the page's own clock (Chromium's performance timeline: from the
 * navigation's start to the moment the first window of node cards is in the
 * document, noted by a MutationObserver the page gets before any script), and
 * the machine's clock around Playwright's calls (that plus the browser's
 * own navigation overhead). Baseline, in the same run: the same page and
 * measures against a coordinator holding one node of ten instances; the
 * ratio is what the cluster's size adds. Median of 9; every run is printed.
 */
import { median, type BenchResult } from "./bench-result.js";
import { domDeadlineMs } from "../support/dashboard-flow.js";
import { paintNodes, startFirstPaintRig } from "../support/first-paint-rig.js";

const runs = 9;

/** Runs in the page before its scripts: notes when the node panel first says how many nodes match (text: the tests' types have no DOM). */
const notePaint = `new MutationObserver((_c, observer) => {
  if (document.getElementById("page-info")?.dataset.matching === undefined) return;
  window.wardenPaintMs = performance.now();
  observer.disconnect();
}).observe(document, { subtree: true, childList: true, attributes: true });`;

interface Times {
  readonly inPageMs: number[];
  readonly wallMs: number[];
}

async function paintTimesMs(nodes: number): Promise<Times> {
  const rig = await startFirstPaintRig(nodes);
  try {
    const out: Times = { inPageMs: [], wallMs: [] };
    for (let i = 0; i < runs; i++) {
      const context = await rig.browser.newContext({ viewport: { width: 1360, height: 860 } });
      try {
        const page = await context.newPage();
        await page.addInitScript({ content: notePaint });
        const t0 = performance.now();
        const painted = page.waitForSelector(`#page-info[data-matching="${String(nodes)}"]`, { timeout: domDeadlineMs, state: "attached" }).then(() => performance.now() - t0);
        const [ms] = await Promise.all([painted, page.goto(rig.url, { waitUntil: "commit" })]);
        out.wallMs.push(ms);
        out.inPageMs.push(Number(await page.evaluate("window.wardenPaintMs")));
      } finally {
        await context.close();
      }
    }
    const line = (xs: number[]): string => `${xs.map((x) => x.toFixed(0)).join(", ")} (median ${median(xs).toFixed(0)}, ${Math.min(...xs).toFixed(0)}..${Math.max(...xs).toFixed(0)})`;
    process.stderr.write(`first paint, ${String(nodes)} nodes / ${String(nodes * 10)} instances: in page ${line(out.inPageMs)} ms; around Playwright ${line(out.wallMs)} ms\n`);
    return out;
  } finally {
    await rig.close();
  }
}

export async function run(): Promise<BenchResult[]> {
  const small = await paintTimesMs(1);
  const large = await paintTimesMs(paintNodes);
  const what = `${String(paintNodes)} nodes / ${String(paintNodes * 10)} instances (median of ${String(runs)})`;
  const baseline = "the same with 1 node / 10 instances";
  return [
    { name: `dashboard first paint, cold cache, ${what}, page's clock`, baseline, ours: median(large.inPageMs), baselineValue: median(small.inPageMs), unit: "ms", higherIsBetter: false },
    { name: `dashboard first paint, cold cache, ${what}, around Playwright`, baseline, ours: median(large.wallMs), baselineValue: median(small.wallMs), unit: "ms", higherIsBetter: false },
  ];
}
