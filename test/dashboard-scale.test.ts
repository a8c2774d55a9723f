/**
 * The dashboard at 1 000 nodes in headless Chromium, against a real
 * coordinator process (simulated agents speaking the real NodeService, two
 * or three adopted instances each): the page renders a window of the nodes
 * with their counts by state, the filter box (node id or model) and the
 * state groups narrow it, the pager moves through it, and the document's
 * element count stays bounded by the window, not by the cluster. The paged
 * HTTP routes answer one page at a time. The screenshot is kept as an artifact.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chromium, type Browser, type Page } from "playwright-core";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { freePort } from "./support/free-port.js";
import { startListingSwarm, type ListingSwarm } from "./support/listing-nodes.js";
import { attributes, chromiumPath, domDeadlineMs } from "./support/dashboard-flow.js";

const nodeCount = 1_000;
const id = (i: number): string => `n-${String(i).padStart(5, "0")}`;
/**
 * The most elements the page may hold, whatever the cluster's size: 25 cards
 * of at most 12 rows (about 120 elements a full card), the 200 event lines,
 * the header and side panel. Every node's card, as before, was over 20 000.
 */
const maxElements = 5_000;

let dir = "";
let coordinator: CoordinatorProcess | undefined;
let swarm: ListingSwarm | undefined;
let browser: Browser | undefined;
let page: Page;
let url = "";

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-dashboard-scale-"));
  coordinator = await startCoordinatorProcess(join(dir, "c.json"), {
    listen: `127.0.0.1:${String(await freePort())}`,
    httpListen: "127.0.0.1:0",
    stateDir: join(dir, "state"),
    embeddedAgent: false,
    // The nodes beat once: they stay ready for the test (states are the listing test's).
    nodeGrace: "1h",
    limits: { maxConnectionsPerPeer: 256 },
    // Replicas on many nodes: a max below their count would scale them down once scaleDownAfter (5 min) passes — on a loaded machine, during the test.
    models: ["m0", "m1", "whisper"].map((m) => ({ id: m, backend: "backend-sim", replicas: { min: 0, max: 1024 } })),
  });
  url = `http://${coordinator.httpAddress ?? ""}`;
  const s = await startListingSwarm(coordinator.address);
  swarm = s;
  let next = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < nodeCount) {
        const i = next++;
        await s.add(id(i), i % 7 === 0 ? ["m0", "m1", "whisper"] : ["m0", "m1"]);
      }
    }),
  );
  browser = await chromium.launch({ executablePath: chromiumPath, headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
  page = await browser.newPage({ viewport: { width: 1360, height: 860 } });
}, 600_000);

afterAll(async () => {
  await browser?.close().catch(() => undefined);
  await swarm?.close();
  await coordinator?.kill();
  if (dir !== "") await rm(dir, { recursive: true, force: true });
});

/** Every element in the document (the page's DOM size). */
const elementCount = (): Promise<number> => page.locator("*").count();
const shownIds = (): Promise<string[]> => attributes(page, "[data-node-id]", "data-node-id");

describe("dashboard at 1 000 nodes", () => {
  it("renders a window of the nodes, filters by id, model and state, pages, and stays bounded", async () => {
    await page.goto(url);
    await page.waitForSelector(`#page-info[data-matching="${String(nodeCount)}"]`, { timeout: domDeadlineMs });
    expect(await shownIds()).toEqual(Array.from({ length: 25 }, (_, i) => id(i)));
    expect(await page.textContent('#node-groups [data-state="all"]')).toBe(`all ${String(nodeCount)}`);
    expect(await page.textContent('#node-groups [data-state="ready"]')).toBe(`ready ${String(nodeCount)}`);
    expect(await page.textContent("#page-info")).toBe(`1–25 of ${String(nodeCount)}`);
    const elements = await elementCount();
    expect(elements).toBeLessThan(maxElements);
    const shot = join(await mkdtemp(join(tmpdir(), "warden-dashboard-scale-artifact-")), "dashboard-1000.png");
    await page.screenshot({ path: shot, fullPage: true });
    process.stdout.write(`dashboard at ${String(nodeCount)} nodes: ${String(elements)} elements; screenshot: ${shot}\n`);

    // The pager: the next 25.
    await page.click("#page-next");
    await page.waitForSelector(`[data-node-id="${id(25)}"]`, { timeout: domDeadlineMs });
    expect(await shownIds()).toEqual(Array.from({ length: 25 }, (_, i) => id(25 + i)));

    // By node id: n-0012x, from the first page again.
    await page.fill("#node-filter", "n-0012");
    await page.waitForSelector('#page-info[data-matching="10"]', { timeout: domDeadlineMs });
    expect(await shownIds()).toEqual(Array.from({ length: 10 }, (_, i) => id(120 + i)));
    // By model: every seventh node runs whisper.
    await page.fill("#node-filter", "whisper");
    await page.waitForSelector(`#page-info[data-matching="${String(Math.ceil(nodeCount / 7))}"]`, { timeout: domDeadlineMs });
    expect((await shownIds()).slice(0, 3)).toEqual([id(0), id(7), id(14)]);
    // A state group with no node: nothing matches, said so.
    await page.click('#node-groups [data-state="unreachable"]');
    await page.waitForSelector('#page-info[data-matching="0"]', { timeout: domDeadlineMs });
    expect(await page.textContent("#nodes")).toContain("no node matches the filter");
    await page.click('#node-groups [data-state="all"]');
    await page.fill("#node-filter", "");
    await page.waitForSelector(`#page-info[data-matching="${String(nodeCount)}"]`, { timeout: domDeadlineMs });
    // Still bounded after a fresh snapshot re-rendered the window.
    expect(await elementCount()).toBeLessThan(maxElements);
  }, 300_000);

  it("GET /api/dashboard/nodes and /models serve one page, with a token to go on and typed refusals", async () => {
    const get = async (path: string): Promise<{ status: number; json: Record<string, unknown> }> => {
      const res = await fetch(`${url}${path}`);
      return { status: res.status, json: (await res.json()) as Record<string, unknown> };
    };
    const first = await get("/api/dashboard/nodes?page_size=400");
    expect(first.status).toBe(200);
    expect((first.json.nodes as { nodeId: string }[]).map((n) => n.nodeId)).toEqual(Array.from({ length: 400 }, (_, i) => id(i)));
    const seen: string[] = [];
    let token = "";
    do {
      const r = await get(`/api/dashboard/nodes?page_size=400${token === "" ? "" : `&page_token=${token}`}`);
      seen.push(...(r.json.nodes as { nodeId: string }[]).map((n) => n.nodeId));
      token = r.json.nextPageToken as string;
    } while (token !== "");
    expect(seen).toEqual(Array.from({ length: nodeCount }, (_, i) => id(i)));
    const whisper = await get("/api/dashboard/models?model=whisper&page_size=1000");
    expect((whisper.json.instances as unknown[]).length).toBe(Math.ceil(nodeCount / 7));
    expect(await get("/api/dashboard/nodes?page_size=1001")).toMatchObject({ status: 400, json: { error: { field: "page_size" } } });
    expect(await get("/api/dashboard/nodes?page_token=bogus")).toMatchObject({ status: 400, json: { error: { field: "page_token" } } });
    expect(await get("/api/dashboard/models?state=sleepy")).toMatchObject({ status: 400, json: { error: { field: "state" } } });
  }, 120_000);
});
