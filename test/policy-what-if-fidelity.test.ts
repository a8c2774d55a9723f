/**
 * Fidelity: a real coordinator (embedded agent, backend-sim processes) runs a
 * scripted workload while it records its trace; the exported trace replayed
 * under the same config gives the same cold starts and idle evictions.
 * Tolerance: exact for these counts — each gap between calls (5 s) is five
 * times the idle timeout (1 s), so on a loaded machine too every gap ends in
 * an idle eviction, live and replayed; calls sent together share one load.
 */
import { afterEach, describe, expect, it } from "vitest";
import { isTraceHeader, parseTraceLine, replayInput, replayTrace, type TraceLine } from "@warden/whatif";
import { simModel, startTestCoordinator, type TestCoordinator } from "./support/coordinator-harness.js";

let t: TestCoordinator | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

const sleepMs = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe("policy what-if fidelity (real coordinator, record, export, replay)", () => {
  it("replayed under the unchanged config, the trace gives the recorded cold starts and idle evictions", async () => {
    t = await startTestCoordinator({ models: [simModel("m1", { memoryEstimate: "1GiB" })], policy: { idleCheck: true, idleTimeout: "1s" } });
    const tc = t;
    for (let round = 0; round < 3; round++) {
      // Two calls together: one load between them.
      await Promise.all([0, 1].map((i) => tc.inference.predict({ model: "m1", options: { Prompt: `round ${String(round)} call ${String(i)}` } }, { timeoutMs: 60_000 })));
      await tc.waitForEvent("eviction.stopped", (e) => tc.events.filter((x) => x.payload.case === "evictionStopped").indexOf(e) === round, 60_000);
      await sleepMs(round < 2 ? 4_000 : 0);
    }
    let text = "";
    for await (const c of tc.admin.exportTrace({}, { timeoutMs: 30_000 })) text += new TextDecoder().decode(c.data);
    const lines: TraceLine[] = [];
    text
      .trimEnd()
      .split("\n")
      .forEach((l, i) => {
        const p = parseTraceLine(l, i + 1);
        if (p !== undefined && !isTraceHeader(p)) lines.push(p);
      });
    const recordedLoads = lines.filter((l) => l.t === "load").length;
    const recordedIdle = lines.filter((l) => l.t === "stop" && l.reason === "idle").length;
    expect(recordedLoads).toBe(3);
    expect(recordedIdle).toBe(3);
    const c = tc.c.config;
    const r = await replayTrace(replayInput(lines), { models: c.models, policy: c.policy, placement: c.placement, enforcement: c.enforcement, cooldown: c.cooldown, stop: c.stop, loadWaitMs: c.loadWaitMs });
    expect(r.calls).toBe(6);
    expect(r.coldStarts).toBe(recordedLoads);
    // The replay ends with the last call: the third idle eviction (after it) is past its end.
    expect(r.evictionsByReason).toEqual({ idle: recordedIdle - 1 });
    expect(r.failedCalls).toBe(0);
  });
});
