/**
 * The swarm benchmark's harness, kept from rotting: five simulated agents
 * against a real coordinator process (auth on) and the bare floor server, a
 * few seconds each. Checks that every node registered and heartbeats were
 * accepted with each node's own token, and that every figure the bench
 * reports is there — no timing is asserted (timing is `npm run bench -- swarm`).
 */
import { describe, expect, it } from "vitest";
import { runSwarm } from "./bench/swarm-run.js";

describe("swarm bench harness", () => {
  it("registers five agents, has their heartbeats accepted on both sides and reports every figure", async () => {
    const r = await runSwarm({ nodes: 5, steadyMs: 3_000, warmupMs: 1_500, listCalls: 2, explainCalls: 1, explainDeadlineMs: 30_000 });
    expect(r.registeredNodes).toBe(5);
    // Ten backends each, adopted from the inventories (a stop or a load at most moves one).
    expect(r.instancesListed).toBeGreaterThanOrEqual(49);
    for (const side of [r.warden, r.floor]) {
      expect(side.agentsStarted).toBe(5);
      expect(side.heartbeats).toBeGreaterThan(0);
      expect(side.agents.failures).toBe(0);
      expect(side.agents.reRegistrations).toBe(0);
      expect(side.cpuSeconds).toBeGreaterThanOrEqual(0);
      expect(Number.isFinite(side.cpuPerHeartbeatMs)).toBe(true);
      expect(Number.isFinite(side.agents.p99Ms)).toBe(true);
      expect(side.rssMiB).toBeGreaterThan(0);
    }
    // The coordinator dialled each agent's AgentService and holds its WatchBackends open.
    expect(r.warden.agents.watchStreams).toBe(5);
    expect(r.notReadyAtEnd).toBe(0);
    expect(Number.isFinite(r.loopDelayP99MaxMs)).toBe(true);
    expect(r.listNodesMs).toHaveLength(2);
    expect(r.listModelsMs).toHaveLength(2);
    expect(r.explainMs.length + r.explainTimeouts).toBe(1);
  });

  it("splits the agents over two generator processes with the agent's own grpc-js client and merges their figures", async () => {
    const r = await runSwarm({ nodes: 5, steadyMs: 3_000, warmupMs: 1_500, listCalls: 1, explainCalls: 0, generators: 2, client: "grpc-js" });
    expect(r.generators).toBe(2);
    // Nodes 0…4 split 2 + 3, each registered once under its own id and token.
    expect(r.registeredNodes).toBe(5);
    for (const side of [r.warden, r.floor]) {
      expect(side.agentsStarted).toBe(5);
      expect(side.heartbeats).toBeGreaterThan(0);
      expect(side.agents.failures).toBe(0);
      expect(side.agents.reRegistrations).toBe(0);
      expect(Number.isFinite(side.agents.p99Ms)).toBe(true);
    }
    expect(r.warden.agents.watchStreams).toBe(5);
    expect(r.notReadyAtEnd).toBe(0);
  });
});
