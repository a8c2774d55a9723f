/**
 * The dashboard in headless Chromium against a real coordinator process
 * (auth on, HTTP listener, embedded agent with backend-sim): what the page
 * shows matches ListNodes/ListModels; a grouped eviction started from the page
 * appears as events and as the new instance, with no reload; the action and
 * read endpoints refuse what they must. The screenshot is kept as an artifact.
 */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { attributes, domDeadlineMs, groupedEvictionFlow, startDashboardRig, useToken, type DashboardRig } from "./support/dashboard-flow.js";

let rig: DashboardRig;

beforeAll(async () => {
  rig = await startDashboardRig();
}, 120_000);

afterAll(async () => {
  await rig.close();
});

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

  it("Load while the only node drains: the outcome in words, naming the draining node (last: it evicts chat-b)", async () => {
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
});
