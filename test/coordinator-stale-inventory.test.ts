/**
 * An instance our stop confirmed gone is never adopted, listed or stopped
 * again, whatever inventory arrives later. A real coordinator (in this test
 * process), a real agent process and a real backend-sim; the stale report is a
 * real heartbeat over loopback gRPC carrying the agent's own inventory taken
 * before the stop — the one a heartbeat in flight during the stop delivers
 * after it (on a loaded machine, before the agent's next one).
 */
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { createClient } from "@warden/grpc";
import { AgentService, BackendState, NodeService, UnloadOutcome } from "@warden/proto";
import { liveTaggedSims, uniqueTag } from "./support/agent-harness.js";
import { liveRemoteAgents, lowPortRange, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";

const fileTag = uniqueTag("coord-stale-inv");
let t: TestCoordinator | undefined;
let agents: RemoteAgent[] = [];

afterEach(async () => {
  for (const a of agents) await a.cleanup();
  agents = [];
  await t?.close();
  t = undefined;
});

afterAll(async () => {
  expect(await liveTaggedSims(fileTag)).toEqual([]);
  expect(await liveRemoteAgents()).toEqual([]);
});

describe("stale inventories after a confirmed stop (coordinator + agent processes)", () => {
  it("a second unload right after STOPPED is NOT_LOADED even when an inventory from before the stop arrives after it: no second eviction, nothing listed", async () => {
    const tc = await startTestCoordinator({ embeddedAgent: false, models: [simModel("m")], agent: { ports: { ...lowPortRange(16), quarantine: "1s" } }, extra: { nodeGrace: "120s" } });
    t = tc;
    const a = await startRemoteAgent({ coordinator: tc.c.address, nodeId: "a", tag: fileTag });
    agents.push(a);
    await until("a registered with an inventory", () => tc.c.nodes.get("a")?.inventory !== undefined || undefined);
    const inc = (await tc.admin.loadModel({ model: "m" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    const agentClient = createClient(AgentService, a.address);
    const nodeClient = createClient(NodeService, tc.c.address);
    try {
      const before = await agentClient.listBackends({});
      expect(before.backends.map((b) => [b.incarnation, b.state])).toEqual([[inc, BackendState.READY]]);
      expect((await tc.admin.unloadModel({ model: "m" })).outcome).toBe(UnloadOutcome.STOPPED);
      // The agent's own heartbeats pause; the one "in flight" (inventory from before the stop,
      // the next sequence number) is delivered now.
      a.pause();
      const n = tc.c.nodes.get("a");
      expect(n).toBeDefined();
      const stale = await nodeClient.heartbeat({ nodeId: "a", bootEpoch: n?.bootEpoch ?? 0n, sequence: (n?.sequence ?? 0n) + 1n, backends: before.backends, orphans: before.orphans });
      expect(stale.registerRequired).toBe(false);

      expect((await tc.admin.listModels({})).instances).toEqual([]);
      expect((await tc.admin.unloadModel({ model: "m" })).outcome).toBe(UnloadOutcome.NOT_LOADED);
      expect((await tc.admin.listModels({})).instances).toEqual([]);
      // Events reach the test after the journal's write: wait for the stop's own before judging what else came.
      await tc.waitForEvent("eviction.stopped", (e) => e.incarnation === inc);
      const mine = tc.events.filter((e) => e.incarnation === inc).map((e) => e.payload.case);
      expect(mine.filter((c) => c === "evictionStarted" || c === "evictionStopped")).toEqual(["evictionStarted", "evictionStopped"]);
      expect(mine).not.toContain("instanceAdopted");
      expect(tc.c.loader.core.instance(inc)).toBeUndefined();
    } finally {
      a.resume();
      agentClient.close();
      nodeClient.close();
    }
    // The agent's next heartbeats are fresh: still nothing, and the model loads anew.
    const seq = tc.c.nodes.get("a")?.sequence ?? 0n;
    await until("two fresh heartbeats", () => (tc.c.nodes.get("a")?.sequence ?? 0n) >= seq + 2n || undefined);
    expect((await tc.admin.listModels({})).instances).toEqual([]);
    const again = await tc.admin.loadModel({ model: "m" }, { timeoutMs: 60_000 });
    expect(again.instance?.incarnation).not.toBe(inc);
  });
});
