/**
 * The dashboard's first paint from a cold cache with 100 nodes and 1 000
 * instances in the state (test/support/first-paint-rig.ts): a fresh browser
 * context (no cache, no storage) renders the first window of node cards with
 * every instance row, the counts by state and the Models page's ten models,
 * the cards in view laid out and shown (off-screen cards skip layout until
 * scrolled to, and show when they are).
 * Content only; how long it takes is test/bench/dashboard-paint.bench.ts's.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { attributes, domDeadlineMs } from "./support/dashboard-flow.js";
import { paintModels, paintNodeId, paintNodes, startFirstPaintRig, type FirstPaintRig } from "./support/first-paint-rig.js";

let rig: FirstPaintRig;

beforeAll(async () => {
  rig = await startFirstPaintRig();
}, 300_000);

afterAll(async () => {
  await rig.close();
});

describe("dashboard first paint at 100 nodes / 1 000 instances", () => {
  it("a cold page shows the first 25 nodes with all their instances, the counts, and every model", async () => {
    const context = await rig.browser.newContext({ viewport: { width: 1360, height: 860 } });
    try {
      const page = await context.newPage();
      await page.goto(rig.url, { waitUntil: "domcontentloaded" });
      await page.waitForSelector(`#page-info[data-matching="${String(paintNodes)}"]`, { timeout: domDeadlineMs });
      expect(await attributes(page, "[data-node-id]", "data-node-id")).toEqual(Array.from({ length: 25 }, (_, i) => paintNodeId(i)));
      expect(await page.textContent('#node-groups [data-state="all"]')).toBe(`all ${String(paintNodes)}`);
      expect(await page.textContent('#node-groups [data-state="ready"]')).toBe(`ready ${String(paintNodes)}`);
      // Each card lists its ten instances, ready, one per model.
      for (const id of [paintNodeId(0), paintNodeId(24)]) {
        expect((await attributes(page, `[data-node-id="${id}"] tr[data-incarnation]`, "data-model")).sort()).toEqual([...paintModels].sort());
        expect(new Set(await attributes(page, `[data-node-id="${id}"] tr[data-incarnation]`, "data-kind"))).toEqual(new Set(["ready"]));
      }
      expect(await page.locator("[data-node-id] tr[data-incarnation]").count()).toBe(250);
      expect(await page.textContent("#page-info")).toBe(`1–25 of ${String(paintNodes)}`);
      // Painted, not only in the document: the cards in view are laid out (off-screen ones may skip layout until scrolled to).
      const first = page.locator(`[data-node-id="${paintNodeId(0)}"]`);
      expect(await first.isVisible()).toBe(true);
      expect((await first.boundingBox())?.height ?? 0).toBeGreaterThan(100);
      expect(await first.locator('tr[data-model="m0"] td.model').textContent()).toBe("m0");
      expect(await first.locator('tr[data-model="m0"] [data-kind="ready"]').isVisible()).toBe(true);
      // The last card of the window is there when scrolled to, rows and all.
      // (The panel is redrawn from each fresh snapshot, so the card is found again each time it is asked about.)
      await page.mouse.wheel(0, 100_000);
      await expect.poll(() => page.locator(`[data-node-id="${paintNodeId(24)}"] tr[data-model="m9"]`).isVisible(), { timeout: domDeadlineMs }).toBe(true);
      await page.goto(`${rig.url}/#/models`, { waitUntil: "domcontentloaded" });
      for (const m of paintModels) await page.waitForSelector(`#models tr[data-model="${m}"]`, { timeout: domDeadlineMs });
      expect(await page.locator("#models tr[data-model]").count()).toBe(paintModels.length);
    } finally {
      await context.close();
    }
  }, 240_000);
});
