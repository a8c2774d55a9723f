/**
 * `npm run screenshot`: regenerates the dashboard's pictures from the flows
 * the tests check — services/coordinator/docs/dashboard.png (Nodes: a grouped
 * eviction, live) and docs/dashboard-<page>.png for Models, Events, Policy,
 * Playground and Plots, at desktop width; the same six at a phone's width (420 px) go
 * to a temporary directory it names (look at them; they are not kept).
 */
import { mkdir, mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Page } from "playwright-core";
import { domDeadlineMs, groupedEvictionFlow, startDashboardRig, useToken } from "./support/dashboard-flow.js";

const docs = join(dirname(fileURLToPath(import.meta.url)), "..", "services", "coordinator", "docs");
const narrowDir = await mkdtemp(join(tmpdir(), "warden-dashboard-narrow-"));
const rig = await startDashboardRig();

async function show(page: Page, hash: string, ready: string, state: "visible" | "attached" = "visible"): Promise<void> {
  await page.goto(`${rig.url}/#/${hash}`, { waitUntil: "domcontentloaded" });
  await page.waitForSelector('#conn[data-state="live"]', { timeout: domDeadlineMs });
  await page.waitForSelector(ready, { timeout: domDeadlineMs, state });
}

async function playground(page: Page): Promise<void> {
  await show(page, "playground", '#pg-model option[value="chat-b"]', "attached");
  await page.selectOption("#pg-model", "chat-b");
  await page.click('#pg-form button[type=submit]');
  await page.waitForSelector('#pg-output[data-done="true"]', { timeout: domDeadlineMs });
}

/** Chat calls to chat-b for `ms`, 1 to 3 at once, through the OpenAI route as the playground sends them. */
async function traffic(ms: number): Promise<void> {
  const end = Date.now() + ms;
  for (let round = 0; Date.now() < end; round++) {
    await Promise.all(
      Array.from({ length: 1 + (round % 3) }, () =>
        fetch(`${rig.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${rig.tokens.admin}`, "content-type": "application/json" }, body: JSON.stringify({ model: "chat-b", messages: [{ role: "user", content: "hi" }] }) }).then((r) => r.arrayBuffer()),
      ),
    );
    await new Promise((r) => setTimeout(r, 300));
  }
}

/** Every page but Nodes, as `page` shows them now, into `dir` (suffix: "" or "-narrow"). */
async function pages(page: Page, inference: Page, dir: string, suffix: string): Promise<string[]> {
  const out: string[] = [];
  const shot = async (p: Page, name: string): Promise<void> => {
    const file = join(dir, `dashboard-${name}${suffix}.png`);
    await p.screenshot({ path: file, fullPage: true });
    out.push(file);
  };
  await show(page, "models", '#models tr[data-model="chat-b"][data-state="ready"]');
  await shot(page, "models");
  await show(page, "events", "#history li");
  await shot(page, "events");
  await show(page, "policy", "#policy-form");
  await shot(page, "policy");
  await playground(inference);
  await shot(inference, "playground");
  // Half a minute of calls (a few at a time), so the plots hold lines, not single dots.
  await traffic(30_000);
  await show(page, "plots", 'figure[data-plot="calls"] path[data-series="chat-b"]:not([data-max="0"])', "attached");
  await shot(page, "plots");
  return out;
}

try {
  await groupedEvictionFlow(rig);
  // A failed load, so the Models page and the event history show one.
  await rig.admin.loadModel({ model: "broken" }, { timeoutMs: domDeadlineMs }).catch(() => undefined);
  await rig.page.goto(`${rig.url}/#/nodes`, { waitUntil: "domcontentloaded" });
  await rig.page.waitForSelector('[data-node-id="local"] tr[data-model="chat-b"]', { timeout: domDeadlineMs });
  // The failed load's row goes with the next snapshot.
  await rig.page.waitForSelector('[data-node-id="local"] tr[data-model="broken"]', { timeout: domDeadlineMs, state: "detached" });
  await rig.page.selectOption("#explain-model", "chat-a");
  await rig.page.click("#explain-form button[type=submit]");
  await rig.page.waitForSelector('#explain [data-decision="evict-then-place"]', { timeout: domDeadlineMs });
  await mkdir(docs, { recursive: true });
  const written = [join(docs, "dashboard.png")];
  await rig.page.screenshot({ path: written[0] as string, fullPage: true });
  const admin = await rig.browser.newPage({ viewport: { width: 1360, height: 860 } });
  await useToken(admin, rig.tokens.admin);
  written.push(...(await pages(rig.page, admin, docs, "")));
  await rig.page.setViewportSize({ width: 420, height: 860 });
  await admin.setViewportSize({ width: 420, height: 860 });
  await show(rig.page, "nodes", '[data-node-id="local"]');
  await rig.page.screenshot({ path: join(narrowDir, "dashboard-nodes-narrow.png"), fullPage: true });
  written.push(join(narrowDir, "dashboard-nodes-narrow.png"), ...(await pages(rig.page, admin, narrowDir, "-narrow")));
  process.stdout.write(`wrote\n${written.join("\n")}\n`);
} finally {
  await rig.close();
}
