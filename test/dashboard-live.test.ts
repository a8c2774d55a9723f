/**
 * The dashboard's live details in headless Chromium against a real
 * coordinator process (auth on, embedded agent, backend-sim): an instance's
 * busy state is pushed as its calls begin and end (a `busy` frame on the
 * stream, not the next snapshot), and the page shows it.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { simModel } from "./support/coordinator-harness.js";
import { domDeadlineMs, startDashboardRig, type DashboardRig } from "./support/dashboard-flow.js";
import { parseSse } from "../services/coordinator/src/http/dashboard/sse-parse.js";

let rig: DashboardRig;

/** A model whose calls take a minute unless cancelled: one call keeps its instance busy while the test looks. */
const slow = simModel("slow", { memoryEstimate: "256MiB", knobs: { predict_delay_ms: 60_000 } });

beforeAll(async () => {
  rig = await startDashboardRig({ extraModels: [slow] });
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
});
