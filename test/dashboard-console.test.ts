/**
 * The dashboard's console pages in headless Chromium against a real
 * coordinator process (auth on, embedded agent, backend-sim): Models, Events
 * (filtered by model, type and node),
 * Policy and Playground render what the Admin API holds, their actions act
 * and show their outcome, a viewer sees no controls, and axe-core finds no
 * serious or critical accessibility violation on any page.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Page } from "playwright-core";
import { attributes, domDeadlineMs, startDashboardRig, useToken, type DashboardRig } from "./support/dashboard-flow.js";
import { seriousAxeViolations } from "./support/axe-check.js";

let rig: DashboardRig;

beforeAll(async () => {
  rig = await startDashboardRig();
}, 120_000);

afterAll(async () => {
  await rig.close();
});

async function open(page: Page, hash: string): Promise<void> {
  await page.goto(`${rig.url}/#/${hash}`, { waitUntil: "domcontentloaded" });
  await page.waitForSelector('#conn[data-state="live"]', { timeout: domDeadlineMs });
  await page.waitForSelector(`#page-${hash}:not([hidden])`, { timeout: domDeadlineMs });
}

describe("dashboard console pages in a real browser", () => {
  it("Models: every configured model, loaded or not; Load, Scale and Unload from the page with their outcome", async () => {
    const { page, admin } = rig;
    await open(page, "models");
    for (const m of ["chat-a", "chat-b", "embed-small", "broken"]) await page.waitForSelector(`#models tr[data-model="${m}"]`, { timeout: domDeadlineMs });
    expect(await page.getAttribute('#models tr[data-model="embed-small"]', "data-state")).toBe("not loaded");
    expect(await page.getAttribute('#nav a[data-nav="models"]', "aria-current")).toBe("page");

    await page.click('#models tr[data-model="embed-small"] button:text("Load")');
    await page.waitForSelector('#models tr[data-model="embed-small"][data-state="ready"]', { timeout: domDeadlineMs });
    await page.waitForSelector('#models-result:text("load embed-small done on local")', { timeout: domDeadlineMs });
    expect(await page.textContent('#models tr[data-model="embed-small"]')).toContain("local");

    await page.fill('[data-scale="embed-small"] input[aria-label^="maximum"]', "2");
    await page.click('[data-scale="embed-small"] button[type=submit]');
    await page.waitForSelector('#models-result:text("replicas 0..2")', { timeout: domDeadlineMs });
    const rep = (await admin.listModels({})).replicas.find((r) => r.model === "embed-small");
    expect(rep?.max).toBe(2);
    await page.waitForSelector('#models tr[data-model="embed-small"] td:text("0..2")', { timeout: domDeadlineMs });

    await page.click('#models tr[data-model="embed-small"] button:text("Unload")');
    await page.waitForSelector('#models-result:text("unload embed-small done: stopped")', { timeout: domDeadlineMs });
    await page.waitForSelector('#models tr[data-model="embed-small"][data-state="not loaded"]', { timeout: domDeadlineMs });
  }, 240_000);

  it("Models: a late answer to an earlier press never replaces a newer press's result", async () => {
    const page = await rig.browser.newPage();
    try {
      await useToken(page, rig.tokens.operator);
      // The first Scale's answer is held back until the second Scale has shown its own.
      let release: () => void = () => undefined;
      const held = new Promise<void>((r) => (release = r));
      let calls = 0;
      await page.route("**/api/dashboard/actions/scale", async (route) => {
        if (++calls === 1) await held;
        await route.continue();
      });
      await open(page, "models");
      await page.waitForSelector('[data-scale="embed-small"]', { timeout: domDeadlineMs });
      await page.fill('[data-scale="embed-small"] input[aria-label^="maximum"]', "3");
      await page.click('[data-scale="embed-small"] button[type=submit]');
      await page.waitForSelector('#models-result:text("scale embed-small to 0..3…")', { timeout: domDeadlineMs });
      await page.fill('[data-scale="chat-a"] input[aria-label^="maximum"]', "2");
      await page.click('[data-scale="chat-a"] button[type=submit]');
      await page.waitForSelector('#models-result:text("scale chat-a to 0..2 done")', { timeout: domDeadlineMs });
      release();
      // The late answer arrived and was set aside: the newer press's result stays.
      await page.waitForSelector('#models-result[data-stale="1"]', { timeout: domDeadlineMs });
      expect(await page.textContent("#models-result")).toBe("scale chat-a to 0..2 done: replicas 0..2");
    } finally {
      await page.close();
      await rig.admin.scaleModel({ model: "embed-small", min: 0, max: 1 });
      await rig.admin.scaleModel({ model: "chat-a", min: 0, max: 1 });
    }
  }, 240_000);

  it("Models: a backend that fails to load says so in words", async () => {
    const { page } = rig;
    await open(page, "models");
    await page.click('#models tr[data-model="broken"] button:text("Load")');
    await page.waitForSelector('#models-result.error:text("last stderr line")', { timeout: domDeadlineMs });
    const text = (await page.textContent("#models-result")) ?? "";
    expect(text).toMatch(/^load broken failed — /);
    process.stdout.write(`failed load, as the page says it: ${text}\n`);
    expect(text).toContain("exit_code knob in LoadModel");
    // The row keeps saying it after the press's answer is gone (a reload reads it from the event history).
    await page.reload({ waitUntil: "domcontentloaded" });
    await page.waitForSelector('[data-failure="broken"]:text("stderr: backend-sim exiting: exit_code knob in LoadModel")', { timeout: domDeadlineMs });
  }, 240_000);

  it("Events: history from before the page opened, filtered by model and type, then the live tail", async () => {
    const { page, admin } = rig;
    await admin.loadModel({ model: "chat-a" }, { timeoutMs: domDeadlineMs });
    await open(page, "events");
    // Loaded before the page opened: only the history can show it.
    await page.waitForSelector('#history li[data-type="backend.loaded"]', { timeout: domDeadlineMs });
    await page.fill("#ev-model", "chat-a");
    await page.fill("#ev-type", "backend.");
    await page.click('#events-filter button[type=submit]');
    await page.waitForSelector('#history-count:text("shown")', { timeout: domDeadlineMs });
    await page.waitForSelector('#history li[data-type="backend.loaded"]', { timeout: domDeadlineMs });
    const shown = async (): Promise<{ type: string; text: string }[]> => {
      const types = await attributes(page, "#history li", "data-type");
      const texts = await page.locator("#history li").allTextContents();
      return types.map((type, i) => ({ type, text: texts[i] ?? "" }));
    };
    const filtered = await shown();
    expect(filtered.length).toBeGreaterThan(0);
    for (const l of filtered) {
      expect(l.text).toContain("chat-a");
      expect(l.type.startsWith("backend.")).toBe(true);
    }
    // The live tail, under a new filter: an unload while the page is open appears without a reload.
    await page.fill("#ev-type", "eviction.stopped");
    await page.click('#events-filter button[type=submit]');
    await page.waitForSelector('#history-status:text("then live")', { timeout: domDeadlineMs });
    const before = (await shown()).length;
    await admin.unloadModel({ model: "chat-a" }, { timeoutMs: domDeadlineMs });
    // One more line than before (a locator, not a page function: the page's CSP forbids evaluating strings).
    await page.locator('#history li[data-type="eviction.stopped"]').nth(before).waitFor({ timeout: domDeadlineMs });
    for (const l of await shown()) expect(l).toMatchObject({ type: "eviction.stopped" });
    // Bad filters are refused naming the field.
    const bad = await fetch(`${rig.url}/api/dashboard/events?type=Bad%20Type`, { headers: { authorization: `Bearer ${rig.tokens.viewer}` } });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { field: "type" } });
  }, 240_000);

  it("Policy: an operator's edit applies through UpdatePolicy; a refused value names its field and changes nothing", async () => {
    const { page, admin } = rig;
    await open(page, "policy");
    await page.waitForSelector("#policy-idleTimeoutMs", { timeout: domDeadlineMs });
    await page.fill("#policy-idleTimeoutMs", "123000");
    await page.click('#policy-form button[type=submit]');
    await page.waitForSelector('#policy-result:text("saved: idleTimeoutMs")', { timeout: domDeadlineMs });
    expect((await admin.getPolicy({})).policy?.idleTimeoutMs).toBe(123000n);
    // Within the form's own bounds, refused by UpdatePolicy (the threshold is in (0, 1]).
    await page.fill("#policy-memoryThreshold", "0");
    await page.click('#policy-form button[type=submit]');
    await page.waitForSelector("#policy-result.error", { timeout: domDeadlineMs });
    expect(await page.textContent("#policy-result")).toMatch(/memory_?[tT]hreshold/);
    expect((await admin.getPolicy({})).policy?.memoryThreshold).not.toBe(0);
  }, 240_000);

  it("Events: the node filter keeps that node's events, in the history and the live tail, and drops events of no node or another", async () => {
    const { page, admin } = rig;
    // An event of the node in the history before the page opens.
    await admin.loadModel({ model: "embed-small" }, { timeoutMs: domDeadlineMs });
    await open(page, "events");
    const filter = async (node: string): Promise<void> => {
      await page.fill("#ev-node", node);
      await page.fill("#ev-model", "");
      await page.fill("#ev-type", "");
      await page.click('#events-filter button[type=submit]');
    };
    const postPolicy = (idleTimeoutMs: number): Promise<Response> => fetch(`${rig.url}/api/dashboard/policy`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${rig.tokens.operator}` }, body: JSON.stringify({ idleTimeoutMs }) });
    // Unfiltered: the Policy edit's event, which names no node, is in the history.
    await filter("");
    await page.waitForSelector('#history li[data-type="policy.updated"]', { timeout: domDeadlineMs });
    // Filtered by the node: only its events, from the history.
    await filter("local");
    await page.locator('#history li[data-type="policy.updated"]').first().waitFor({ state: "detached", timeout: domDeadlineMs });
    await page.waitForSelector('#history li[data-type="backend.loaded"]:text("embed-small on local")', { timeout: domDeadlineMs });
    const texts = await page.locator("#history li").allTextContents();
    expect(texts.length).toBeGreaterThan(0);
    for (const t of texts) expect(t).toContain("local");
    // The live tail under the same filter: a policy edit (no node) stays out, the unload that follows it on the node comes in.
    expect((await postPolicy(125_000)).status).toBe(200);
    await admin.unloadModel({ model: "embed-small" }, { timeoutMs: domDeadlineMs });
    await page.waitForSelector('#history li[data-type="eviction.stopped"]:text("embed-small on local")', { timeout: domDeadlineMs });
    expect(await page.locator('#history li[data-type="policy.updated"]').count()).toBe(0);
    // Another node's filter: nothing of this one.
    await filter("elsewhere");
    await page.waitForSelector('#history-count:text-is("0 shown")', { timeout: domDeadlineMs });
  }, 240_000);

  it("Playground: a streamed chat completion shows its text, time to first token and tokens", async () => {
    const page = await rig.browser.newPage();
    try {
      await useToken(page, rig.tokens.admin);
      await open(page, "playground");
      await page.waitForSelector('#pg-model option[value="chat-b"]', { state: "attached", timeout: domDeadlineMs });
      await page.selectOption("#pg-model", "chat-b");
      await page.click('#pg-form button[type=submit]');
      await page.waitForSelector('#pg-output[data-done="true"]', { timeout: domDeadlineMs * 2 });
      expect(await page.textContent("#pg-error")).toBe("");
      expect(((await page.textContent("#pg-output")) ?? "").length).toBeGreaterThan(0);
      expect(await page.textContent("#pg-ttft")).toMatch(/^\d+ ms$/);
      expect(Number(await page.textContent("#pg-tokens"))).toBeGreaterThan(0);
    } finally {
      await page.close();
    }
  }, 240_000);

  it("a viewer sees every page and no control; the favicon is served", async () => {
    const page = await rig.browser.newPage();
    try {
      await useToken(page, rig.tokens.viewer);
      await open(page, "models");
      await page.waitForSelector('#models tr[data-model="chat-a"]', { timeout: domDeadlineMs });
      expect(await page.locator("#models button").count()).toBe(0);
      await open(page, "policy");
      await page.waitForSelector("#policy output#policy-idleTimeoutMs", { timeout: domDeadlineMs });
      expect(await page.locator("#policy button").count()).toBe(0);
      const posted = await fetch(`${rig.url}/api/dashboard/policy`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${rig.tokens.viewer}` }, body: JSON.stringify({ idleCheck: false }) });
      expect(posted.status).toBe(403);
    } finally {
      await page.close();
    }
    const icon = await fetch(`${rig.url}/favicon.ico`);
    expect(icon.status).toBe(200);
    expect(icon.headers.get("content-type")).toBe("image/x-icon");
    expect([...new Uint8Array(await icon.arrayBuffer()).slice(0, 4)]).toEqual([0, 0, 1, 0]);
  }, 240_000);

  it("axe-core: no serious or critical accessibility violation on any page", async () => {
    const { page } = rig;
    const found: Record<string, unknown[]> = {};
    for (const p of ["nodes", "models", "events", "policy", "playground", "plots"]) {
      await open(page, p);
      if (p === "nodes") {
        await page.waitForSelector('[data-node-id="local"] .drift', { timeout: domDeadlineMs });
        // The embedded agent has no GPU: it measures the host's RAM, so drift is explained, never an alarm.
        expect(await page.getAttribute('[data-node-id="local"] .drift', "title")).toContain("the host's used RAM");
        expect(await page.locator('[data-node-id="local"] .drift-high').count()).toBe(0);
      }
      if (p === "models") await page.waitForSelector('#models tr[data-model="chat-a"]', { timeout: domDeadlineMs });
      if (p === "policy") await page.waitForSelector("#policy-form", { timeout: domDeadlineMs });
      if (p === "plots") await page.waitForSelector('figure[data-plot="calls"]', { timeout: domDeadlineMs });
      const v = await seriousAxeViolations(page);
      if (v.length > 0) found[p] = v;
    }
    expect(found).toEqual({});
  }, 240_000);
});
