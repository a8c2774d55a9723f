/**
 * Catalog-aware placement over real processes: a coordinator
 * without an embedded agent and two agent processes with different catalogs.
 * Each agent registers its catalog's backend names; ListNodes shows them;
 * placement skips a node whose agent lacks the model's backend, and
 * ExplainPlacement says so. A model whose backend no agent has is NO_FIT with
 * that reason, and every load of it fails with the reason (FAILED_PRECONDITION,
 * no start attempted, so no load-failure cooldown hides it).
 */
import { afterEach, describe, expect, it } from "vitest";
import { Code, isWardenError } from "@warden/common";
import { eventTypeOf } from "@warden/events";
import { NodeState, PlacementDecision } from "@warden/proto";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { simCatalog } from "./support/agent-harness.js";

const tag = `cluster-catalog-${String(process.pid)}-${String(Date.now())}`;
let t: TestCoordinator | undefined;
let agents: RemoteAgent[] = [];

afterEach(async () => {
  for (const a of agents) await a.cleanup();
  agents = [];
  await t?.close();
  t = undefined;
  expect(await liveRemoteAgents()).toEqual([]);
});

async function loadError(tc: TestCoordinator, model: string): Promise<{ code: number; message: string }> {
  try {
    await tc.admin.loadModel({ model });
  } catch (err) {
    if (!isWardenError(err)) throw err;
    return { code: err.code, message: err.message };
  }
  throw new Error(`loading ${model} succeeded`);
}

describe("catalog-aware placement (coordinator + two agent processes)", () => {
  it("skips a node whose agent lacks the model's backend, says why, and a model no agent can run fails with that reason on every load", async () => {
    const models = [simModel("sim-model"), { id: "nowhere", backend: "no-such-backend" }];
    // Few, short enforcement retries: a load no node can take fails within about a second.
    const tc = await startTestCoordinator({ embeddedAgent: false, models, policy: { enforcementRetries: 3, enforcementRetryInterval: "100ms" }, extra: { placement: "spread" } });
    t = tc;
    // node-a sorts first, so a planner blind to catalogs would pick it on ties.
    agents.push(await startRemoteAgent({ coordinator: tc.c.address, nodeId: "node-a", tag, config: { catalog: { "other-sim": simCatalog(`${tag}-node-a`) } } }));
    agents.push(await startRemoteAgent({ coordinator: tc.c.address, nodeId: "node-b", tag }));
    await until("both nodes ready", async () => (await tc.admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 2);

    const listed = Object.fromEntries((await tc.admin.listNodes({})).nodes.map((n) => [n.nodeId, n.backends]));
    expect(listed).toEqual({ "node-a": ["other-sim"], "node-b": ["backend-sim"] });

    const explained = await tc.admin.explainPlacement({ model: "sim-model" });
    expect(explained.decision).toBe(PlacementDecision.PLACE);
    expect(explained.nodeId).toBe("node-b");
    const reasons = Object.fromEntries(explained.nodes.map((n) => [n.nodeId, n.reason]));
    expect(reasons["node-a"]).toBe('agent has no backend "backend-sim" in its catalog');
    const loaded = await tc.admin.loadModel({ model: "sim-model" });
    expect(loaded.instance?.nodeId).toBe("node-b");

    const nowhere = await tc.admin.explainPlacement({ model: "nowhere" });
    expect(nowhere.decision).toBe(PlacementDecision.NO_FIT);
    expect(nowhere.nodes.map((n) => n.reason)).toEqual(['agent has no backend "no-such-backend" in its catalog', 'agent has no backend "no-such-backend" in its catalog']);
    // Twice: no start was attempted, so no load-failure cooldown replaces the cause.
    for (let i = 0; i < 2; i++) {
      const e = await loadError(tc, "nowhere");
      expect(e.code).toBe(Code.FailedPrecondition);
      expect(e.message).toContain('node-a: agent has no backend "no-such-backend" in its catalog');
      expect(e.message).toContain('node-b: agent has no backend "no-such-backend" in its catalog');
      expect(e.message).not.toMatch(/cooldown/);
    }
    expect(tc.events.filter((ev) => eventTypeOf(ev) === "backend.load-failed")).toEqual([]);
    expect(await agents[0]!.liveBackends()).toEqual([]);
    expect(await agents[1]!.liveBackends()).toHaveLength(1);
  });
});
