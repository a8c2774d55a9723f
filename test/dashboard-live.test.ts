/**
 * The dashboard's live details in headless Chromium against a real
 * coordinator process (auth on, embedded agent, backend-sim): an instance's
 * busy state is pushed as its calls begin and end (a `busy` frame on the
 * stream, not the next snapshot), and the page shows it; a backend's logs
 * on its instance's row (GetInstanceLogs, operator only), a failing one's
 * stderr too, with its load job's phase on the Nodes page; the Plots page's
 * charts from the coordinator's metrics ring, moving when calls flow (calls,
 * latency, tokens per second, the admission queue) and each GPU's memory
 * (the node's agent reads a stand-in nvidia-smi: two GPUs).
 */
import { spawn } from "node:child_process";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient } from "@warden/grpc";
import { AdminService } from "@warden/proto";
import { Code, WardenError } from "@warden/common";
import { withToken } from "./support/auth-tokens.js";
import { simModel } from "./support/coordinator-harness.js";
import { domDeadlineMs, noisySimModel, noisySimStderr, startDashboardRig, useToken, type DashboardRig } from "./support/dashboard-flow.js";
import { parseSse } from "../services/coordinator/src/http/dashboard/sse-parse.js";

let rig: DashboardRig;

const root = resolve(import.meta.dirname, "..");

/** The built `warden` CLI, asynchronously (the coordinator is a child process; the test process stays free). */
function warden(args: string[], token: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, [join(root, "services", "cli", "bin", "warden.js"), ...args], { cwd: root, env: { ...process.env, NO_COLOR: "1", WARDEN_TOKEN: token }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (b: Buffer) => (stdout += b.toString()));
    child.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
    child.once("error", fail);
    child.once("close", (code) => {
      done({ code: code ?? -1, stdout, stderr });
    });
  });
}

/** A model whose calls take a minute unless cancelled: one call keeps its instance busy while the test looks. */
const slow = simModel("slow", { memoryEstimate: "256MiB", knobs: { predict_delay_ms: 60_000 } });
/** Calls that answer at once, to make the plots move. */
const quick = simModel("quick", { memoryEstimate: "256MiB" });
/** One call at a time through admission, each held a minute: the next ones wait in its queue. */
const gated = { ...simModel("gated", { memoryEstimate: "256MiB", knobs: { predict_delay_ms: 60_000 } }), replicas: { targetInFlight: 1 }, admission: { maxInFlightPerReplica: 1 } };

/** Writes its trouble to stderr, loads for 20 s, then refuses the load: long enough to look at while it loads. */
const noisy = noisySimModel("noisy", 20_000);

beforeAll(async () => {
  rig = await startDashboardRig({ extraModels: [slow, quick, gated, noisy], fakeGpus: true, noisySim: true });
}, 120_000);

afterAll(async () => {
  await rig.close();
});

/** Starts a completion on `model` that runs until `stop` (the HTTP call is aborted, the coordinator cancels it). */
function holdCall(model: string): { stop(): void; done: Promise<unknown> } {
  const ctl = new AbortController();
  const done = fetch(`${rig.url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${rig.tokens.inference}` },
    body: JSON.stringify({ model, prompt: "hold" }),
    signal: ctl.signal,
  }).then((r) => r.text()).catch(() => undefined);
  return { stop: () => { ctl.abort(); }, done };
}

/** Reads the dashboard stream until `want` matches a frame (or the deadline); returns the matching frame's data. */
async function awaitFrame(want: (event: string, data: string) => boolean, started: () => void): Promise<string> {
  const ctl = new AbortController();
  const res = await fetch(`${rig.url}/api/dashboard/stream`, { headers: { authorization: `Bearer ${rig.tokens.viewer}` }, signal: ctl.signal });
  expect(res.status).toBe(200);
  const reader = (res.body as ReadableStream<Uint8Array>).pipeThrough(new TextDecoderStream()).getReader();
  const deadline = setTimeout(() => { ctl.abort(); }, domDeadlineMs);
  let buf = "";
  let first = true;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) throw new Error("the stream ended before the frame came");
      const parsed = parseSse(buf + value);
      buf = parsed.rest;
      for (const m of parsed.messages) {
        if (first && m.event === "snapshot") {
          first = false;
          started();
        }
        if (want(m.event, m.data)) return m.data;
      }
    }
  } finally {
    clearTimeout(deadline);
    ctl.abort();
  }
}

describe("dashboard live details in a real browser", () => {
  it("busy state: a call's start and end are pushed as busy frames, and the row turns busy, then ready", async () => {
    const { page, admin } = rig;
    const loaded = await admin.loadModel({ model: "slow" }, { timeoutMs: domDeadlineMs });
    const incarnation = loaded.instance?.incarnation ?? "";
    expect(incarnation).not.toBe("");

    // On the wire: the call's start is a busy frame naming the instance with one call in flight.
    let call: ReturnType<typeof holdCall> | undefined;
    const frame = JSON.parse(await awaitFrame((e, d) => e === "busy" && d.includes(incarnation), () => { call = holdCall("slow"); })) as { at: string; instances: { incarnation: string; inFlight: number; model: string }[] };
    expect(frame.instances.find((i) => i.incarnation === incarnation)).toMatchObject({ model: "slow", inFlight: 1 });
    expect(Number.isNaN(Date.parse(frame.at))).toBe(false);
    call?.stop();
    await call?.done;

    // In the page: the row follows the calls.
    await page.goto(`${rig.url}/#/nodes`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector('#conn[data-state="live"]', { timeout: domDeadlineMs });
    const row = `[data-node-id="local"] tr[data-incarnation="${incarnation}"]`;
    await page.waitForSelector(`${row}[data-kind="ready"]`, { timeout: domDeadlineMs });
    const held = holdCall("slow");
    await page.waitForSelector(`${row}[data-kind="busy"]`, { timeout: domDeadlineMs });
    expect(await page.textContent(`${row} td:nth-child(3)`)).toBe("1");
    held.stop();
    await held.done;
    await page.waitForSelector(`${row}[data-kind="ready"]`, { timeout: domDeadlineMs });
  }, 240_000);

  it("backend logs: the instance row's Logs shows the backend's output; GetInstanceLogs is operator-only and names a bad incarnation", async () => {
    const { page, admin } = rig;
    const loaded = await admin.loadModel({ model: "slow" }, { timeoutMs: domDeadlineMs });
    const incarnation = loaded.instance?.incarnation ?? "";
    // Over gRPC: the agent's tail of the files the backend writes.
    const r = await admin.getInstanceLogs({ incarnation, maxLines: 5 });
    expect(r).toMatchObject({ model: "slow", nodeId: "local" });
    expect(r.stdoutLines.join("\n")).toContain("backend-sim listening");
    expect(r.stdoutLines.length).toBeLessThanOrEqual(5);
    const refused = async (p: Promise<unknown>): Promise<WardenError> => WardenError.from(await p.then(() => new Error("answered"), (e: unknown) => e));
    expect(await refused(admin.getInstanceLogs({ incarnation: "not an id" }))).toMatchObject({ code: Code.InvalidArgument, details: { field: "incarnation" } });
    const unknown = await refused(admin.getInstanceLogs({ incarnation: "01ARZ3NDEKTSV4RRFFQ69G5FAV" }));
    expect(unknown.code).toBe(Code.NotFound);
    expect(unknown.message).toContain("incarnation");
    expect(await refused(admin.getInstanceLogs({ incarnation, maxLines: 1_001 }))).toMatchObject({ code: Code.InvalidArgument, details: { field: "max_lines" } });
    const viewer = createClient(AdminService, rig.coord.address, withToken(rig.tokens.viewer));
    try {
      expect((await refused(viewer.getInstanceLogs({ incarnation }))).code).toBe(Code.PermissionDenied);
    } finally {
      viewer.close();
    }
    // Over HTTP: the same, with the dashboard's error shape.
    const get = async (q: string, token: string): Promise<{ status: number; json: Record<string, unknown> }> => {
      const res = await fetch(`${rig.url}/api/dashboard/logs?${q}`, { headers: { authorization: `Bearer ${token}` } });
      return { status: res.status, json: (await res.json()) as Record<string, unknown> };
    };
    expect(await get(`incarnation=${incarnation}`, rig.tokens.viewer)).toMatchObject({ status: 403 });
    expect(await get("incarnation=bad%20id", rig.tokens.operator)).toMatchObject({ status: 400, json: { error: { field: "incarnation" } } });
    expect(await get(`incarnation=${incarnation}&lines=0`, rig.tokens.operator)).toMatchObject({ status: 400, json: { error: { field: "lines" } } });

    // The CLI: by incarnation, or by a model with one instance; a bad --lines is exit 2 naming it.
    const byModel = await warden(["logs", "slow", "--addr", rig.coord.address, "--lines", "3"], rig.tokens.operator);
    expect(byModel).toMatchObject({ code: 0 });
    expect(byModel.stdout).toContain(`== stdout of slow (${incarnation}) on local`);
    expect(byModel.stdout).toContain("backend-sim listening");
    const badLines = await warden(["logs", incarnation, "--addr", rig.coord.address, "--lines", "0"], rig.tokens.operator);
    expect(badLines.code).toBe(2);
    expect(badLines.stderr).toContain("--lines");

    // In the page: the row's Logs button, then the lines under the row, kept across snapshots.
    await page.goto(`${rig.url}/#/nodes`, { waitUntil: "domcontentloaded" });
    const row = `[data-node-id="local"] tr[data-incarnation="${incarnation}"]`;
    await page.waitForSelector(`${row} button[data-action="logs"]`, { timeout: domDeadlineMs });
    await page.click(`${row} button[data-action="logs"]`);
    const out = `tr[data-logs-for="${incarnation}"] pre[data-stream="stdout"]`;
    await page.waitForSelector(out, { timeout: domDeadlineMs });
    expect(await page.textContent(out)).toContain("backend-sim listening");
    // A viewer sees no Logs button.
    const vp = await rig.browser.newPage();
    try {
      await useToken(vp, rig.tokens.viewer);
      await vp.goto(`${rig.url}/#/nodes`, { waitUntil: "domcontentloaded" });
      await vp.waitForSelector(row, { timeout: domDeadlineMs });
      expect(await vp.locator(`${row} button`).count()).toBe(0);
    } finally {
      await vp.close();
    }
  }, 240_000);

  it("a failing backend: its load job and phase on the Nodes page while it loads, its stderr through the row's Logs, then the failure in words", async () => {
    const { page } = rig;
    await page.goto(`${rig.url}/#/nodes`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector('#conn[data-state="live"]', { timeout: domDeadlineMs });
    await page.selectOption("#explain-model", "noisy");
    await page.click("#load-button");
    // The Placement panel's Load jobs: the load in progress and its phase (ListModels' load job).
    const job = '#load-jobs li[data-model="noisy"]';
    await page.waitForSelector(`${job}[data-state="loading"]:text("noisy: loading on local")`, { timeout: domDeadlineMs });
    // The Models page says the same on the model's row.
    const models = await rig.browser.newPage();
    await useToken(models, rig.tokens.viewer);
    await models.goto(`${rig.url}/#/models`, { waitUntil: "domcontentloaded" });
    await models.waitForSelector('#models [data-load-job="noisy"][data-job-state="loading"]:text("load job: loading on local")', { timeout: domDeadlineMs });
    await models.close();
    // Its instance's row while it loads, and the backend's stderr under it.
    const row = '[data-node-id="local"] tr[data-model="noisy"][data-kind="loading"]';
    await page.waitForSelector(`${row} button[data-action="logs"]`, { timeout: domDeadlineMs });
    const incarnation = (await page.getAttribute(row, "data-incarnation")) ?? "";
    await page.click(`${row} button[data-action="logs"]`);
    const stderr = `tr[data-logs-for="${incarnation}"] pre[data-stream="stderr"]`;
    await page.waitForSelector(stderr, { timeout: domDeadlineMs });
    const lines = ((await page.textContent(stderr)) ?? "").split("\n");
    for (const l of noisySimStderr) expect(lines).toContain(l);
    // Then the load fails: the press's answer and the load job say why.
    await page.waitForSelector("#action-result.error", { timeout: domDeadlineMs });
    expect(await page.textContent("#action-result")).toMatch(/^load of noisy failed — .*weights do not match their checksums/);
    await page.waitForSelector(`${job}[data-state="failed"]:text("weights do not match their checksums")`, { timeout: domDeadlineMs });
    await page.locator(`[data-node-id="local"] tr[data-model="noisy"]`).waitFor({ state: "detached", timeout: domDeadlineMs });
  }, 240_000);

  it("plots: the calls-per-second chart of a model moves while its calls flow, loads are marked; memory per node is drawn", async () => {
    const page = await rig.browser.newPage();
    await useToken(page, rig.tokens.viewer);
    await rig.admin.loadModel({ model: "quick" }, { timeoutMs: domDeadlineMs });
    const flowing = { on: true };
    const flow = (async () => {
      while (flowing.on) {
        await fetch(`${rig.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${rig.tokens.inference}` }, body: JSON.stringify({ model: "quick", prompt: "hi", max_tokens: 2 }) }).then((r) => r.text()).catch(() => undefined);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    try {
      await page.goto(`${rig.url}/#/plots`, { waitUntil: "domcontentloaded" });
      await page.waitForSelector('#page-plots:not([hidden])', { timeout: domDeadlineMs });
      // A sample with calls in it reaches the page (samples every 5 s; the page re-reads as often). Attached, not
      // visible: a steady series (quick's p50 stays at a couple of milliseconds call after call) is a flat line, with no height.
      await page.waitForSelector('figure[data-plot="calls"] path[data-series="quick"]:not([data-max="0"])', { state: "attached", timeout: domDeadlineMs });
      await page.waitForSelector('figure[data-plot="p50"] path[data-series="quick"]:not([data-max="0"])', { state: "attached", timeout: domDeadlineMs });
      // The load of "quick" (and the others before it) marked on the time axis, from the event history.
      await page.waitForSelector('figure[data-plot="calls"] line[data-mark="load"]', { state: "attached", timeout: domDeadlineMs });
      expect(await page.locator('figure[data-plot="memory-local"] path[data-series="measured"]').count()).toBe(1);
      expect(Number(await page.getAttribute('figure[data-plot="memory-local"] path[data-series="accounted"]', "data-max"))).toBeGreaterThan(0);
      expect(await page.textContent("#plots-info")).toContain("One sample every 5 s");
    } finally {
      flowing.on = false;
      await flow;
      await page.close();
    }
  }, 240_000);

  it("plots: tokens per second move while calls flow, the admission queue while calls wait, and each GPU's memory is drawn beside its node's", async () => {
    const page = await rig.browser.newPage();
    await useToken(page, rig.tokens.viewer);
    await rig.admin.loadModel({ model: "quick" }, { timeoutMs: domDeadlineMs });
    await rig.admin.loadModel({ model: "gated" }, { timeoutMs: domDeadlineMs });
    const flowing = { on: true };
    const flow = (async () => {
      while (flowing.on) {
        await fetch(`${rig.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${rig.tokens.inference}` }, body: JSON.stringify({ model: "quick", prompt: "hi", max_tokens: 2 }) }).then((r) => r.text()).catch(() => undefined);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    // One call holds gated's only place; two more wait in its queue until the test ends them.
    const held = [holdCall("gated"), holdCall("gated"), holdCall("gated")];
    try {
      await page.goto(`${rig.url}/#/plots`, { waitUntil: "domcontentloaded" });
      await page.waitForSelector('#page-plots:not([hidden])', { timeout: domDeadlineMs });
      // Attached, not visible: a flat line (a queue steady at 2) has no height.
      await page.waitForSelector('figure[data-plot="tokens"] path[data-series="quick"]:not([data-max="0"])', { state: "attached", timeout: domDeadlineMs });
      await page.waitForSelector('figure[data-plot="queued"] path[data-series="gated"]:not([data-max="0"])', { state: "attached", timeout: domDeadlineMs });
      // Two wait at most (one holds the place): a sample may catch the third on its way in, never more.
      const waited = Number(await page.getAttribute('figure[data-plot="queued"] path[data-series="gated"]', "data-max"));
      expect(waited).toBeGreaterThanOrEqual(1);
      expect(waited).toBeLessThanOrEqual(2);
      // Calls that never wait draw a flat zero queue.
      expect(await page.getAttribute('figure[data-plot="queued"] path[data-series="quick"]', "data-max")).toBe("0");
      // The stand-in GPUs: 1 and 2 GiB used of 80 each, one line each, beside the node's chart.
      expect(await page.locator('figure[data-plot="memory-local"]').count()).toBe(1);
      await page.waitForSelector('figure[data-plot="gpus-local"] path[data-series="GPU 1 of 80.0 GiB"]', { state: "attached", timeout: domDeadlineMs });
      expect(Number(await page.getAttribute('figure[data-plot="gpus-local"] path[data-series="GPU 0 of 80.0 GiB"]', "data-max"))).toBe(1024 * 1024 * 1024);
      expect(Number(await page.getAttribute('figure[data-plot="gpus-local"] path[data-series="GPU 1 of 80.0 GiB"]', "data-max"))).toBe(2 * 1024 * 1024 * 1024);
    } finally {
      flowing.on = false;
      for (const h of held) h.stop();
      await Promise.all([flow, ...held.map((h) => h.done)]);
      await page.close();
    }
  }, 240_000);
});
