/**
 * Fuzzing the agent's AgentService (a real agent over loopback gRPC, with a
 * backend-sim instance it started) and backend-sim's Backend service (served
 * by the same GrpcServer the simulator's process uses): ≥ 10 000 hostile
 * requests each plus a 10^6-element repeated field per method that has one.
 * Every answer is a clear status; the agent's backends after the burst are
 * the ones before it, and backend-sim still answers Health.
 *
 * In the heavy project: 10 000 cases over the wire cost 15–60 s per surface
 * on a loaded 2-core machine, more than the main project's budget.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GrpcServer, createClient } from "@warden/grpc";
import { AgentService, Backend } from "@warden/proto";
import { createBackendSim, defaultSimKnobs } from "@warden/backend-sim";
import { randomPortRange, startAgentHarness, startReady, uniqueTag, type AgentHarness } from "./support/agent-harness.js";
import { casesPerRun, fuzzSurface, millionElementBurst, runsPerSurface } from "./support/fuzz-surface.js";

let agent: AgentHarness;
let sim: GrpcServer;
let simAddress = "";
const simExits: string[] = [];

beforeAll(async () => {
  agent = await startAgentHarness({ tag: uniqueTag("fuzz"), ports: randomPortRange(8) });
  await startReady(agent.client, "m");
  sim = new GrpcServer();
  // In process: a knob asking the simulator to exit is recorded, not obeyed.
  const s = createBackendSim({ knobs: { ...defaultSimKnobs }, hooks: { exit: (code, reason) => { simExits.push(`${String(code)} ${reason}`); }, setIgnoreSigterm: () => undefined } });
  sim.add(Backend, s.impl);
  simAddress = (await sim.listen("127.0.0.1:0")).address;
});
afterAll(async () => {
  await sim.shutdown(1_000);
  await agent.close({ stopBackends: true });
});

async function agentState() {
  const r = await agent.client.listBackends({});
  return r.backends.map((b) => ({ incarnation: b.incarnation, model: b.model, state: b.state, address: b.address, pid: b.pid }));
}

// StopOrphan: every request also says pid 0 (refused before any scan or signal); the agent never signals what it did not start anyway.
const postfixes = { StopOrphan: Uint8Array.of(0x08, 0x00) };

describe("hostile bursts at the agent and at backend-sim", () => {
  it("AgentService: ≥ 10 000 cases, each a clear status, backends unchanged", { timeout: 300_000 }, async () => {
    const before = await agentState();
    expect(before).toHaveLength(1);
    const r = await fuzzSurface(agent.address, AgentService, postfixes);
    expect(r.cases).toBe(runsPerSurface * casesPerRun);
    expect((await millionElementBurst(agent.address, AgentService)).length).toBeGreaterThanOrEqual(0);
    await expect.poll(agentState, { timeout: 30_000 }).toEqual(before);
  });

  it("backend-sim's Backend: ≥ 10 000 cases, each a clear status, still healthy", { timeout: 300_000 }, async () => {
    const r = await fuzzSurface(simAddress, Backend);
    expect(r.cases).toBe(runsPerSurface * casesPerRun);
    // A method backend-sim does not implement answers UNIMPLEMENTED without decoding anything (upstream's answer too).
    expect((await millionElementBurst(simAddress, Backend, [8, 12])).length).toBeGreaterThan(0);
    const c = createClient(Backend, simAddress);
    try {
      expect(Buffer.from((await c.health({})).message).toString()).toBe("OK");
    } finally {
      c.close();
    }
  });
});
