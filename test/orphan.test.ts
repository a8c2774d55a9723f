/**
 * An orphan — a live process the agent started (it carries the agent's mark:
 * WARDEN_NODE_ID, WARDEN_INCARNATION, WARDEN_AGENT_TOKEN) listening in its
 * port range without a record — is adopted into its node's accounting (event,
 * ListModels, counts toward the limit) and stopped after the grace with reason
 * orphan. An unmarked process is foreign instead (test/foreign.test.ts).
 */
import { spawn } from "node:child_process";
import { join, resolve } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { EvictionReason, InstanceState } from "@warden/proto";
import { agentMarkOf, markEnv } from "../services/agent/src/process-mark.js";
import { newIncarnation } from "./support/agent-harness.js";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";

const root = resolve(import.meta.dirname, "..");
let t: TestCoordinator | undefined;
const pids: number[] = [];

afterEach(async () => {
  for (const pid of pids.splice(0)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // already gone: what the test wants
    }
  }
  await t?.close();
  t = undefined;
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("orphans", () => {
  it("a marked process of this node without a record is adopted as an orphan, counts toward the limit, and is stopped after the grace (reason orphan)", async () => {
    t = await startTestCoordinator({
      models: [simModel("m")],
      policy: { limitPerNode: 1, enforcementRetries: 200 },
      agent: { orphanScanInterval: "300ms", heartbeatInterval: "250ms" },
      // The load blocked by the orphan waits loadWait for it to go.
      extra: { orphanGrace: "3s", loadWait: "200s" },
    });
    const agentConfig = t.c.agent!.config;
    const port = agentConfig.portMax;
    // as the agent would have spawned it, before its record was lost
    const env = { ...markEnv(agentMarkOf(agentConfig.nodeId, agentConfig.stateDir), newIncarnation()), PATH: process.env.PATH ?? "" };
    const stranger = spawn(process.execPath, ["--import", "tsx", join(root, "services/backend-sim/src/main.ts"), "--addr", `127.0.0.1:${String(port)}`], { cwd: root, stdio: "ignore", env });
    pids.push(stranger.pid!);
    const adopted = await t.waitForEvent("orphan.adopted", (e) => e.address === `127.0.0.1:${String(port)}`);
    expect(adopted.payload.case === "orphanAdopted" && adopted.payload.value.pid).toBe(stranger.pid);
    const listed = (await t.admin.listModels({})).instances.find((i) => i.state === InstanceState.ORPHAN);
    expect(listed?.address).toBe(`127.0.0.1:${String(port)}`);
    // the orphan takes the node's only slot: a load waits (need-more) until it is gone
    const tc = t;
    const load = tc.admin.loadModel({ model: "m" });
    const stopped = await tc.waitForEvent("eviction.stopped", (e) => e.address === `127.0.0.1:${String(port)}`);
    expect(stopped.payload.case === "evictionStopped" && stopped.payload.value.reason).toBe(EvictionReason.ORPHAN);
    await until("stranger gone", () => !alive(stranger.pid!) || stranger.exitCode !== null || undefined);
    const started = tc.events.find((e) => e.payload.case === "evictionStarted" && e.address === `127.0.0.1:${String(port)}`);
    expect(started).toBeDefined();
    // the model loaded only after the orphan was gone
    const loaded = await load;
    expect(loaded.instance?.model).toBe("m");
    // (events reach watchers once journaled: wait for it rather than race it)
    const loadedEvent = await tc.waitForEvent("backend.loaded", (e) => e.model === "m");
    expect(tc.events.indexOf(loadedEvent)).toBeGreaterThan(tc.events.indexOf(stopped));
  });
});
