/**
 * The Policy page's what-if sweep in headless Chromium against a real
 * coordinator process (auth on, embedded agent, backend-sim): the page
 * replays the coordinator's own recorded calls under the live policy and
 * each candidate, shows them as a plot and a table (cold starts, evictions,
 * waits, peak memory), and Apply sets a candidate through UpdatePolicy. A
 * viewer sees neither Run nor Apply, and the sweep route refuses it.
 */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient } from "@warden/grpc";
import { AdminService, InferenceService } from "@warden/proto";
import { attributes, domDeadlineMs, startDashboardRig, useToken, type DashboardRig } from "./support/dashboard-flow.js";
import { withToken } from "./support/auth-tokens.js";
import { until } from "./support/coordinator-harness.js";

let rig: DashboardRig;

beforeAll(async () => {
  rig = await startDashboardRig();
}, 120_000);

afterAll(async () => {
  await rig.close();
});

const sleepMs = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function post(path: string, token: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${rig.url}${path}`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${token}` }, body: JSON.stringify(body) });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

describe("Policy page: what-if sweep", () => {
  it("replays the recorded calls per candidate, plots and tabulates them, and Apply sets the chosen one", async () => {
    // Two calls at least 3 s apart: under a 1 s idle timeout the second is a cold start again; under 10 min it is not.
    const inference = createClient(InferenceService, rig.coord.address, withToken(rig.tokens.inference));
    const exporter = createClient(AdminService, rig.coord.address, withToken(rig.tokens.admin));
    try {
      await inference.predict({ model: "chat-a", options: { Prompt: "one" } }, { timeoutMs: domDeadlineMs });
      await sleepMs(3_000);
      await inference.predict({ model: "chat-a", options: { Prompt: "two" } }, { timeoutMs: domDeadlineMs });
      // The node's memory reading (taken 5 s after it joined) is what the replay places on.
      await until(
        "the trace holds a memory reading",
        async () => {
          let text = "";
          for await (const c of exporter.exportTrace({}, { timeoutMs: 30_000 })) text += new TextDecoder().decode(c.data);
          return text.includes('"t":"mem"');
        },
        domDeadlineMs,
      );
    } finally {
      inference.close();
      exporter.close();
    }

    const { page, admin } = rig;
    await page.goto(`${rig.url}/#/policy`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector("#sweep-form", { timeout: domDeadlineMs });
    await page.selectOption("#sweep-field-0", "idleTimeoutMs");
    await page.fill("#sweep-values-0", "1000, 600000");
    await page.selectOption("#sweep-field-1", "idleCheck");
    await page.fill("#sweep-values-1", "true");
    await page.click("#sweep-run");
    await page.waitForSelector("#sweep-table tbody tr >> nth=2", { timeout: domDeadlineMs });
    expect(await attributes(page, "#sweep-table tbody tr", "data-point")).toEqual(["live policy", "idleTimeoutMs=1000 idleCheck=true", "idleTimeoutMs=600000 idleCheck=true"]);
    const cell = async (row: number, col: string): Promise<string> => (await page.textContent(`#sweep-table tbody tr[data-row="${String(row)}"] td[data-col="${col}"]`)) ?? "";
    // The live policy (no idle check) and a 10 min timeout load once; a 1 s timeout evicts between the calls and loads again.
    expect(await cell(0, "coldStarts")).toBe("1");
    expect(await cell(2, "coldStarts")).toBe("1");
    expect(await cell(1, "coldStarts")).toBe("2");
    expect(await cell(1, "evictions")).toMatch(/idle [1-9]/);
    expect(await cell(1, "peakBytes")).toBe("2.0 GiB");
    expect(await page.locator("#sweep-plot circle").count()).toBe(3);
    // The live policy's row has no Apply; each candidate's has one.
    expect(await page.locator("#sweep-table button[data-apply]").count()).toBe(2);
    // Kept as an artifact in its own temp dir (the rig's is removed when the coordinator stops).
    const shot = join(await mkdtemp(join(tmpdir(), "warden-policy-sweep-artifact-")), "policy-sweep.png");
    await page.screenshot({ path: shot, fullPage: true });
    process.stdout.write(`policy sweep screenshot: ${shot}\n`);

    await page.click('#sweep-table button[data-apply="1"]');
    await page.waitForSelector('#policy-result:text("applied: idleTimeoutMs=1000 idleCheck=true")', { timeout: domDeadlineMs });
    const p = (await admin.getPolicy({})).policy;
    expect(p?.idleTimeoutMs).toBe(1000n);
    expect(p?.idleCheck).toBe(true);
    // The form shows the applied policy.
    expect(await page.inputValue("#policy-idleTimeoutMs")).toBe("1000");
    await admin.updatePolicy({ patch: { idleCheck: false, idleTimeoutMs: 900_000n } });
  }, 240_000);

  it("a viewer sees no Run and no Apply, and the sweep route refuses it; a bad sweep is refused naming the field", async () => {
    const page = await rig.browser.newPage();
    try {
      await useToken(page, rig.tokens.viewer);
      await page.goto(`${rig.url}/#/policy`, { waitUntil: "domcontentloaded" });
      await page.waitForSelector("#policy-sweep", { timeout: domDeadlineMs });
      expect(await page.locator("#sweep-run").count()).toBe(0);
      expect(await page.locator("#policy-sweep button").count()).toBe(0);
    } finally {
      await page.close();
    }
    const axes = [{ field: "idleTimeoutMs", values: [1000] }];
    expect((await post("/api/dashboard/policy/sweep", rig.tokens.viewer, { axes })).status).toBe(403);
    expect(await post("/api/dashboard/policy/sweep", rig.tokens.operator, { axes: [{ field: "tickIntervalMs", values: [1] }] })).toMatchObject({ status: 400, json: { error: { field: "axes[0].field" } } });
    expect(await post("/api/dashboard/policy/sweep", rig.tokens.operator, { axes: [{ field: "idleTimeoutMs", values: [1, 2, 3, 4, 5, 6, 7, 8] }, { field: "limitPerNode", values: [1, 2, 3] }] })).toMatchObject({ status: 400, json: { error: { field: "axes" } } });
    expect(await post("/api/dashboard/policy/sweep", rig.tokens.operator, { axes: [{ field: "memoryThreshold", values: [2] }] })).toMatchObject({ status: 400 });
  }, 120_000);
});
