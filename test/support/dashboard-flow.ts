/**
 * The dashboard in a real browser against a real coordinator process: shared
 * by test/dashboard.test.ts and the README screenshot (`npm run screenshot`),
 * so the picture is what the test saw. Headless Chromium is Debian's
 * (/usr/bin/chromium, installed by .ci/run), driven by playwright-core; no
 * browser is ever downloaded.
 */
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";
import { createClient, type Client } from "@warden/grpc";
import { AdminService } from "@warden/proto";
import { simModel } from "./coordinator-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./coordinator-process.js";
import { testPortRange } from "./port-range.js";
import { writeTokensFile } from "./auth-tokens.js";
import { withToken } from "./auth-tokens.js";
import { backendSimCatalogEntry } from "../../services/agent/src/backend-sim-catalog.js";

export const chromiumPath = process.env.WARDEN_CHROMIUM ?? "/usr/bin/chromium";

/** Generous: a loaded 2-core machine starts Chromium and backends slowly. Conditions are awaited, never timed. */
export const domDeadlineMs = 60_000;

export interface DashboardRig {
  readonly dir: string;
  readonly coord: CoordinatorProcess;
  /** http://host:port of the dashboard. */
  readonly url: string;
  readonly admin: Client<typeof AdminService>;
  readonly tokens: { readonly operator: string; readonly inference: string; readonly viewer: string; readonly admin: string };
  readonly browser: Browser;
  readonly page: Page;
  close(): Promise<void>;
}

/** Two chat models of one concurrency group: loading the second evicts the first (DESIGN §3.4). */
export const groupedModels = [simModel("chat-a", { groups: ["gpu0"], memoryEstimate: "2GiB" }), simModel("chat-b", { groups: ["gpu0"], memoryEstimate: "3GiB" }), simModel("embed-small", { memoryEstimate: "512MiB" }), simModel("broken", { memoryEstimate: "256MiB", knobs: { exit_code: 3 } })];

/**
 * An nvidia-smi stand-in (as test/agent.test.ts's): two 80 GiB GPUs holding
 * 1 and 2 GiB, no compute processes, so the agent reports GPUs (the Plots
 * page's per-GPU chart) while backend-sim allocates nothing.
 */
async function writeFakeNvidiaSmi(dir: string): Promise<string> {
  const script = join(dir, "nvidia-smi");
  await writeFile(script, `#!/bin/sh
case "$1" in
  --query-gpu=index,name,memory.total,memory.used) printf '0, Test GPU, 81920, 1024\\n1, Test GPU, 81920, 2048\\n' ;;
  --query-compute-apps=pid,used_memory) ;;
  *) exit 9 ;;
esac
`);
  await chmod(script, 0o755);
  return script;
}

/** What the `noisy-sim` backend writes to stderr as it starts (noisySimModel). */
export const noisySimStderr = ["noisy-sim: reading /models/noisy.gguf", "noisy-sim: error: tensor blk.0.attn_q.weight: checksum mismatch"] as const;

/**
 * A backend that fails as a real one does: it writes what went wrong to
 * stderr, takes a while to load, then refuses the load. backend-sim wrapped in
 * a script that writes `noisySimStderr` first (backend-sim itself writes
 * stderr only as it exits); catalog entry `noisy-sim` (`noisySim` rig option).
 */
export function noisySimModel(id: string, loadDelayMs: number): Record<string, unknown> {
  return { ...simModel(id, { memoryEstimate: "256MiB", knobs: { load_delay_ms: loadDelayMs, fail_load: "weights do not match their checksums" } }), backend: "noisy-sim" };
}

async function writeNoisySim(dir: string): Promise<Record<string, unknown>> {
  const script = join(dir, "noisy-sim");
  await writeFile(script, `#!/bin/sh\n${noisySimStderr.map((l) => `echo '${l}' >&2\n`).join("")}exec "$@"\n`);
  await chmod(script, 0o755);
  // backend-sim's own entry (its environment, working directory), started through the script.
  const sim = backendSimCatalogEntry();
  return { builtin: "backend-sim", command: script, args: [sim.command, ...sim.args] };
}

/** Starts `warden up` (auth on, HTTP listener on a free port, embedded agent) and a browser on its dashboard as an operator. */
export async function startDashboardRig(o: { readonly extraModels?: readonly Record<string, unknown>[]; readonly fakeGpus?: boolean; /** Adds the `noisy-sim` catalog entry (noisySimModel). */ readonly noisySim?: boolean } = {}): Promise<DashboardRig> {
  const dir = await mkdtemp(join(tmpdir(), "warden-dashboard-"));
  const { path: tokensFile, tokens } = await writeTokensFile(dir, { operator: { role: "operator" }, inference: { role: "inference" }, viewer: { role: "viewer" }, admin: { role: "admin" } });
  let coord: CoordinatorProcess | undefined;
  let browser: Browser | undefined;
  try {
    coord = await startCoordinatorProcess(join(dir, "coordinator.yaml"), {
      listen: "127.0.0.1:0",
      httpListen: "127.0.0.1:0",
      stateDir: join(dir, "state"),
      embeddedAgent: true,
      // A load while the only node drains answers after this (the dashboard's Load shows it in words).
      loadWait: "3s",
      auth: { tokensFile },
      agent: {
        nodeId: "local",
        ports: { ...testPortRange(), quarantine: "1s" },
        readiness: { attempts: 100, interval: "200ms", initialInterval: "20ms" },
        grace: "3s",
        ...(o.fakeGpus === true ? { nvidiaSmi: await writeFakeNvidiaSmi(dir), gpus: ["0", "1"] } : { nvidiaSmi: "" }),
        catalog: { "backend-sim": { builtin: "backend-sim" }, ...(o.noisySim === true ? { "noisy-sim": await writeNoisySim(dir) } : {}) },
      },
      policy: { tickInterval: "100ms", enforcementRetries: 60, enforcementRetryInterval: "250ms" },
      stop: { timeout: "10s", rpcTimeout: "8s" },
      recoveryWindow: "500ms",
      models: [...groupedModels, ...(o.extraModels ?? [])],
    }, 60_000, { via: "warden-up" });
    if (coord.httpAddress === undefined) throw new Error("the coordinator logged no httpAddress");
    const url = `http://${coord.httpAddress}`;
    const admin = createClient(AdminService, coord.address, withToken(tokens.operator));
    browser = await chromium.launch({ executablePath: chromiumPath, headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
    const page = await browser.newPage({ viewport: { width: 1360, height: 860 } });
    await useToken(page, tokens.operator);
    const c = coord;
    const b = browser;
    return {
      dir,
      coord: c,
      url,
      admin,
      tokens,
      browser: b,
      page,
      async close() {
        // `warden up` stops every backend it started when it stops: checked, so a rig never
        // leaves a backend-sim behind (the coordinator's own entry point keeps them, by design).
        const addresses = (await admin.listModels({}).catch(() => ({ instances: [] }))).instances.map((i) => i.address).filter((a) => a !== "");
        admin.close();
        await b.close().catch(() => undefined);
        c.child.kill("SIGTERM");
        await c.exited;
        await rm(dir, { recursive: true, force: true });
        const listening = (await Promise.all(addresses.map(async (a) => ((await accepts(a)) ? a : undefined)))).filter((a) => a !== undefined);
        if (listening.length > 0) throw new Error(`backends still listening after warden up stopped: ${listening.join(", ")}`);
      },
    };
  } catch (err) {
    await browser?.close().catch(() => undefined);
    await coord?.kill();
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

/** Whether something accepts TCP connections at host:port now. */
function accepts(address: string): Promise<boolean> {
  const i = address.lastIndexOf(":");
  return new Promise((resolve) => {
    const sock = connect({ host: address.slice(0, i), port: Number(address.slice(i + 1)) });
    sock.once("connect", () => {
      sock.destroy();
      resolve(true);
    });
    sock.once("error", () => {
      resolve(false);
    });
  });
}

/** The page reads its token from sessionStorage (what its token form stores); set before any script runs. */
export async function useToken(page: Page, token: string): Promise<void> {
  await page.addInitScript({ content: `sessionStorage.setItem("warden.dashboard.token", ${JSON.stringify(token)});` });
}

/** Values of `attribute` on every element `selector` matches, in document order. */
export async function attributes(page: Page, selector: string, attribute: string): Promise<string[]> {
  const all = await page.locator(selector).all();
  return (await Promise.all(all.map((l) => l.getAttribute(attribute, { timeout: 5_000 }).catch(() => null)))).map((v) => v ?? "");
}

/** Incarnations the page shows, by node (foreign processes excluded: ListModels does not list them). */
export async function shownInstances(page: Page): Promise<Record<string, string[]>> {
  const out: Record<string, string[]> = {};
  for (const id of await attributes(page, "[data-node-id]", "data-node-id")) {
    out[id] = (await attributes(page, `[data-node-id="${id}"] tr[data-incarnation]:not([data-kind="foreign"])`, "data-incarnation")).sort();
  }
  return out;
}

/** ListNodes / ListModels as the same shape. */
export async function listedInstances(admin: Client<typeof AdminService>): Promise<Record<string, string[]>> {
  const [nodes, models] = await Promise.all([admin.listNodes({}), admin.listModels({})]);
  const out: Record<string, string[]> = {};
  for (const n of nodes.nodes) out[n.nodeId] = [];
  for (const i of models.instances) (out[i.nodeId] ??= []).push(i.incarnation);
  for (const k of Object.keys(out)) out[k]?.sort();
  return out;
}

/** Waits until the page shows exactly what the Admin API lists (re-read on each try: both sides move). */
export async function untilPageMatchesAdmin(page: Page, admin: Client<typeof AdminService>, timeoutMs = domDeadlineMs): Promise<Record<string, string[]>> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const [shown, listed] = await Promise.all([shownInstances(page), listedInstances(admin)]);
    if (JSON.stringify(shown) === JSON.stringify(listed)) return listed;
    if (Date.now() > end) throw new Error(`the dashboard never matched ListNodes/ListModels: page ${JSON.stringify(shown)} vs admin ${JSON.stringify(listed)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * The flow the test checks and the screenshot shows: chat-a loaded through
 * the Admin API before the page opens; then, on the page, ExplainPlacement
 * for chat-b (evict-then-place) and its Load button, which evicts chat-a (same
 * group) — the page sees the eviction and the new instance over its event
 * stream, without a reload.
 */
export async function groupedEvictionFlow(rig: DashboardRig): Promise<{ before: Record<string, string[]>; after: Record<string, string[]> }> {
  const { page, admin } = rig;
  await admin.loadModel({ model: "chat-a" }, { timeoutMs: domDeadlineMs });
  await page.goto(rig.url, { waitUntil: "domcontentloaded" });
  await page.waitForSelector('#conn[data-state="live"]', { timeout: domDeadlineMs });
  await page.waitForSelector('[data-node-id="local"] tr[data-model="chat-a"][data-kind="ready"]', { timeout: domDeadlineMs });
  const before = await untilPageMatchesAdmin(page, admin);
  await page.selectOption("#explain-model", "chat-b");
  await page.click("#explain-form button[type=submit]");
  await page.waitForSelector('#explain [data-decision="evict-then-place"]', { timeout: domDeadlineMs });
  await page.click("#load-button");
  await page.waitForSelector('#events li[data-type="eviction.started"]', { timeout: domDeadlineMs });
  await page.waitForSelector('#events li[data-type="eviction.stopped"]', { timeout: domDeadlineMs });
  await page.waitForSelector('[data-node-id="local"] tr[data-model="chat-b"][data-kind="ready"]', { timeout: domDeadlineMs });
  await page.locator('[data-node-id="local"] tr[data-model="chat-a"]').waitFor({ state: "detached", timeout: domDeadlineMs });
  await page.waitForSelector("#action-result:not(:empty)", { timeout: domDeadlineMs });
  const after = await untilPageMatchesAdmin(page, admin);
  return { before, after };
}
