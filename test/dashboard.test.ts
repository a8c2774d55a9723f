/**
 * The dashboard in headless Chromium against a real coordinator process
 * (auth on, HTTP listener, embedded agent with backend-sim): what the page
 * shows matches ListNodes/ListModels; a grouped eviction started from the page
 * appears as events and as the new instance, with no reload; the action and
 * read endpoints refuse what they must; Explain is dated and asked again while
 * shown; a row's Unload and a card's Drain and Undrain say what runs in words,
 * then their outcome; a page whose script load failed loads it again; the
 * page greys while its coordinator is gone (last).
 * The screenshot is kept as an artifact.
 */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Page } from "playwright-core";
import { until } from "./support/coordinator-harness.js";
import { attributes, domDeadlineMs, groupedEvictionFlow, startDashboardRig, useToken, type DashboardRig } from "./support/dashboard-flow.js";

let rig: DashboardRig;

beforeAll(async () => {
  rig = await startDashboardRig();
}, 120_000);

afterAll(async () => {
  await rig.close();
});

/** Holds the page's next POST to the action `action` until `release` is called: what the page says while the call runs can be read. */
async function holdAction(page: Page, action: string): Promise<{ release(): void }> {
  let release: () => void = () => undefined;
  const held = new Promise<void>((r) => (release = r));
  await page.route(`**/api/dashboard/actions/${action}`, async (route) => {
    await held;
    await route.continue();
  }, { times: 1 });
  return { release };
}

/** The browser's window, as much as `computed` uses (the tests' types have no DOM). */
interface StyleWindow {
  getComputedStyle(e: unknown): Record<"opacity" | "filter", string>;
}

/** `getComputedStyle(selector)[property]` as the page has it now (run in the page, which its CSP allows: no string is evaluated). */
async function computed(page: Page, selector: string, property: "opacity" | "filter"): Promise<string> {
  return page.locator(selector).evaluate((e, p) => (globalThis as unknown as StyleWindow).getComputedStyle(e)[p], property);
}

async function post(path: string, token: string | undefined, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${rig.url}${path}`, { method: "POST", headers: { "content-type": "application/json", ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) }, body: JSON.stringify(body) });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

describe("dashboard in a real browser", () => {
  it("shows what the Admin API lists, and a grouped eviction live, without a reload", async () => {
    const { before, after } = await groupedEvictionFlow(rig);
    expect(Object.keys(before)).toEqual(["local"]);
    expect(before.local).toHaveLength(1);
    expect(after.local).toHaveLength(1);
    expect(after.local?.[0]).not.toBe(before.local?.[0]);
    // The same page load saw it all: its stream delivered the events in order.
    const types = (await attributes(rig.page, "#events li", "data-type")).reverse();
    const started = types.indexOf("eviction.started");
    expect(started).toBeGreaterThanOrEqual(0);
    expect(types.indexOf("eviction.stopped")).toBeGreaterThan(started);
    const startedText = await rig.page.textContent('#events li[data-type="eviction.started"]');
    expect(startedText).toContain("chat-a on local: reason group");
    // Memory: the bar shows the agent's measure and Warden's accounting (chat-b's 3 GiB estimate).
    expect(await rig.page.textContent('[data-node-id="local"] .bar-label')).toContain("Warden accounts 3.0 GiB");
    // chat-a was loaded before the page opened: its line comes from the event history the list starts with.
    expect(await rig.page.locator('#events li[data-type="backend.loaded"]', { hasText: "loaded chat-a on local" }).count()).toBe(1);
    // Its own temp dir: the rig's is removed when the coordinator stops, the artifact stays.
    const shot = join(await mkdtemp(join(tmpdir(), "warden-dashboard-artifact-")), "dashboard.png");
    await rig.page.screenshot({ path: shot, fullPage: true });
    process.stdout.write(`dashboard screenshot: ${shot}\n`);
  }, 240_000);

  it("actions: validated whole, operator role required, JSON errors naming the field", async () => {
    const bad = await post("/api/dashboard/actions/load", rig.tokens.operator, { model: "chat-a", nodeid: "local" });
    expect(bad.status).toBe(400);
    expect(bad.json).toMatchObject({ error: { code: "invalid_argument", field: "nodeid" } });
    const badType = await post("/api/dashboard/actions/drain", rig.tokens.operator, { nodeId: "local", force: "yes" });
    expect(badType).toMatchObject({ status: 400, json: { error: { field: "force" } } });
    const unknown = await post("/api/dashboard/actions/reboot", rig.tokens.operator, {});
    expect(unknown).toMatchObject({ status: 404, json: { error: { field: "action" } } });
    expect((await post("/api/dashboard/actions/unload", rig.tokens.viewer, { model: "chat-b" })).status).toBe(403);
    expect((await post("/api/dashboard/actions/unload", rig.tokens.inference, { model: "chat-b" })).status).toBe(403);
    expect((await post("/api/dashboard/actions/unload", undefined, { model: "chat-b" })).status).toBe(401);
    // Nothing above changed anything: chat-b is still the one instance.
    const m = await rig.admin.listModels({});
    expect(m.instances.map((i) => i.model)).toEqual(["chat-b"]);
  });

  it("reads take a viewer's token or above, as ListNodes does (an inference token only learns who it is); the page asks for one", async () => {
    const get = (path: string, token?: string): Promise<Response> => fetch(`${rig.url}${path}`, { headers: token === undefined ? {} : { authorization: `Bearer ${token}` } });
    expect((await get("/api/dashboard/snapshot")).status).toBe(401);
    const inf = await get("/api/dashboard/whoami", rig.tokens.inference);
    expect(await inf.json()).toEqual({ authOn: true, role: "inference", name: "inference", canAct: false, may: { load: false, unload: false, drain: false, undrain: false, scale: false, policy: false, logs: false } });
    const refused = await get("/api/dashboard/snapshot", rig.tokens.inference);
    expect(refused.status).toBe(403);
    expect(await refused.json()).toMatchObject({ error: { code: "permission_denied" } });
    const snap = (await (await get("/api/dashboard/snapshot", rig.tokens.viewer)).json()) as { nodes: { nodeId: string }[] };
    expect(snap.nodes.map((n) => n.nodeId)).toEqual(["local"]);
    expect((await get("/api/dashboard/explain?model=chat-a&x=1", rig.tokens.viewer)).status).toBe(400);
    // A viewer's page: live, but without buttons.
    const page = await rig.browser.newPage();
    await useToken(page, rig.tokens.viewer);
    await page.goto(rig.url);
    await page.waitForSelector('[data-node-id="local"] tr[data-model="chat-b"]', { timeout: domDeadlineMs });
    expect(await page.$$("button[data-action]")).toHaveLength(0);
    expect(await page.isHidden("#load-button")).toBe(true);
    await page.close();
  }, 120_000);

  it("a page whose script load fails (cut, then answered 503) says so, loads it again and comes up live; the CSP still refuses any other inline script", async () => {
    const page = await rig.browser.newPage();
    try {
      await useToken(page, rig.tokens.viewer);
      let asked = 0;
      let held: (() => void) | undefined;
      const second = new Promise<void>((r) => (held = r));
      await page.route("**/dashboard/app.js", async (route) => {
        asked += 1;
        if (asked === 1) return route.abort("connectionreset");
        if (asked === 2) {
          // Held until the page was seen saying so, then refused as a closing listener refuses.
          await second;
          return route.fulfill({ status: 503, contentType: "application/json", body: "{}" });
        }
        return route.continue();
      });
      const csp: string[] = [];
      page.on("console", (m) => {
        if (/Content Security Policy/i.test(m.text())) csp.push(m.text());
      });
      await page.goto(rig.url, { waitUntil: "domcontentloaded" });
      await until("the page says its script did not load", async () => (await page.textContent("#conn")) === "the page's script did not load; retrying", domDeadlineMs);
      expect(await page.getAttribute("#conn", "data-state")).toBe("connecting");
      held!();
      await page.waitForSelector('#conn[data-state="live"]', { timeout: domDeadlineMs });
      await page.waitForSelector('[data-node-id="local"]', { timeout: domDeadlineMs });
      expect(asked).toBe(3);
      // Exactly one copy of the client is on the page: the failed loads left no script element behind.
      expect(await page.locator('script[src="/dashboard/app.js"]').count()).toBe(1);
      // The hash admits the page's own loader only: a script added inline afterwards is refused.
      await page.evaluate(() => {
        const d = (globalThis as unknown as { document: { createElement(t: string): { textContent: string }; body: { appendChild(n: unknown): void } } }).document;
        const s = d.createElement("script");
        s.textContent = "document.body.dataset.injected = 'yes'";
        d.body.appendChild(s);
      });
      await until("the CSP refusal is reported", async () => csp.length > 0, domDeadlineMs);
      expect(await page.getAttribute("body", "data-injected")).toBeNull();
    } finally {
      await page.close();
    }
  }, 120_000);

  it("Explain is dated and asked again as the cluster moves; a row's Unload says in words what runs, then its outcome", async () => {
    const { page, admin } = rig;
    await page.goto(rig.url, { waitUntil: "domcontentloaded" });
    await page.waitForSelector('#conn[data-state="live"]', { timeout: domDeadlineMs });
    const row = '[data-node-id="local"] tr[data-model="chat-b"]';
    await page.waitForSelector(`${row}[data-kind="ready"]`, { timeout: domDeadlineMs });
    // chat-a shares chat-b's group: placing it would evict chat-b.
    await page.selectOption("#explain-model", "chat-a");
    await page.click("#explain-form button[type=submit]");
    await page.waitForSelector('#explain [data-decision="evict-then-place"]', { timeout: domDeadlineMs });
    const firstAt = Date.parse((await page.getAttribute("#explain .explain-at", "data-at")) ?? "");
    expect(Number.isNaN(firstAt)).toBe(false);
    expect(await page.textContent("#explain .explain-at")).toMatch(/^as of \S.* · asked again every 5 s while shown$/);
    // One node (the embedded one), listed whole: it fits only after evicting chat-b.
    expect(await page.textContent("#explain .explain-counts")).toBe("1 node · 0 fit now, 1 after eviction");

    // The row's Unload: the words while the call runs (its answer held back), then its outcome.
    const held = await holdAction(page, "unload");
    await page.click(`${row} button[data-action="unload"]`);
    await page.waitForSelector('#action-result:text-is("unloading chat-b…")', { timeout: domDeadlineMs });
    held.release();
    await page.waitForSelector('#action-result:text-is("unloaded chat-b: stopped")', { timeout: domDeadlineMs });
    await page.locator(row).waitFor({ state: "detached", timeout: domDeadlineMs });
    expect((await admin.listModels({})).instances).toHaveLength(0);

    // Nobody pressed Explain again: a snapshot after the unload asked again, and the answer says when.
    await page.waitForSelector('#explain [data-decision="place"]', { timeout: domDeadlineMs });
    expect(Date.parse((await page.getAttribute("#explain .explain-at", "data-at")) ?? "")).toBeGreaterThan(firstAt);
  }, 240_000);

  it("a card's Drain and Undrain: the words while each runs, then the node draining (its instance moved off) and back", async () => {
    const { page, admin } = rig;
    await admin.loadModel({ model: "embed-small" }, { timeoutMs: domDeadlineMs });
    const draining = async (): Promise<boolean | undefined> => (await admin.listNodes({})).nodes.find((n) => n.nodeId === "local")?.draining;
    await page.goto(rig.url, { waitUntil: "domcontentloaded" });
    await page.waitForSelector('#conn[data-state="live"]', { timeout: domDeadlineMs });
    const card = '[data-node-id="local"]';
    await page.waitForSelector(`${card} tr[data-model="embed-small"][data-kind="ready"]`, { timeout: domDeadlineMs });

    const drain = await holdAction(page, "drain");
    await page.click(`${card} button[data-action="drain"]`);
    await page.waitForSelector('#action-result:text-is("draining local…")', { timeout: domDeadlineMs });
    drain.release();
    await page.waitForSelector('#action-result:text("local is draining: takes no new loads")', { timeout: domDeadlineMs });
    await page.waitForSelector(`${card} .node-status:text("draining")`, { timeout: domDeadlineMs });
    await page.locator(`${card} tr[data-model="embed-small"]`).waitFor({ state: "detached", timeout: domDeadlineMs });
    await page.waitForSelector(`${card} button[data-action="undrain"]`, { timeout: domDeadlineMs });
    expect(await page.locator(`${card} button[data-action="drain"]`).count()).toBe(0);
    expect(await draining()).toBe(true);

    const undrain = await holdAction(page, "undrain");
    await page.click(`${card} button[data-action="undrain"]`);
    await page.waitForSelector('#action-result:text-is("undraining local…")', { timeout: domDeadlineMs });
    undrain.release();
    await page.waitForSelector('#action-result:text-is("local takes loads again")', { timeout: domDeadlineMs });
    await page.waitForSelector(`${card} button[data-action="drain"]`, { timeout: domDeadlineMs });
    expect(await page.textContent(`${card} .node-status`)).not.toContain("draining");
    expect(await draining()).toBe(false);
  }, 240_000);

  it("Load while the only node drains: the outcome in words, naming the draining node", async () => {
    const { page, admin } = rig;
    await admin.drainNode({ nodeId: "local" }, { timeoutMs: domDeadlineMs });
    try {
      await page.goto(rig.url, { waitUntil: "domcontentloaded" });
      await page.waitForSelector('#conn[data-state="live"]', { timeout: domDeadlineMs });
      await page.selectOption("#explain-model", "embed-small");
      await page.click("#load-button");
      await page.waitForSelector("#action-result.error", { timeout: domDeadlineMs });
      const text = await page.textContent("#action-result");
      expect(text).toMatch(/^load of embed-small failed — .*node is draining/);
    } finally {
      await admin.undrainNode({ nodeId: "local" }, { timeoutMs: domDeadlineMs });
    }
  }, 240_000);

  it("while its coordinator is gone the page is greyed and says so, keeping what it last showed (last: it stops the coordinator)", async () => {
    const { page } = rig;
    await page.goto(rig.url, { waitUntil: "domcontentloaded" });
    await page.waitForSelector('body[data-conn="live"]', { timeout: domDeadlineMs });
    await page.waitForSelector('[data-node-id="local"]', { timeout: domDeadlineMs });
    expect(await computed(page, "main", "opacity")).toBe("1");
    expect(await computed(page, "main", "filter")).toBe("none");

    rig.coord.child.kill("SIGTERM");
    await rig.coord.exited;
    await page.waitForSelector('body[data-conn="error"]', { timeout: domDeadlineMs });
    expect(await page.textContent("#conn")).toMatch(/retrying/);
    // Greyed by the style sheet (after its 0.2 s fade): what the page shows may be stale.
    await until("the page greyed", async () => (await computed(page, "main", "opacity")) === "0.5", domDeadlineMs);
    expect(await computed(page, "main", "filter")).toBe("grayscale(1)");
    // What it last showed stays on screen, greyed.
    expect(await page.locator('[data-node-id="local"]').count()).toBe(1);
  }, 240_000);
});
