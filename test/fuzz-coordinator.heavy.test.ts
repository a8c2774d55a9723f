/**
 * Fuzzing the coordinator's gRPC surfaces over real loopback HTTP/2: Admin,
 * Inference (main grpc-js port and the lean data-plane listener) and Node,
 * each with ≥ 10 000 generated hostile requests (random and truncated bytes,
 * malformed frames, random field values with hostile strings) plus a 10^6-
 * element repeated field per method that has one. Every answer is a clear
 * gRPC status, the coordinator keeps serving, and the cluster state
 * (ListModels, ListNodes, open watches, in-flight counts) after the burst is
 * what it was before.
 *
 * In the heavy project: 10 000 cases over the wire cost 15–60 s per surface
 * on a loaded 2-core machine, more than the main project's budget.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AdminService, InferenceService, NodeService } from "@warden/proto";
import { simModel, startTestCoordinator, type TestCoordinator } from "./support/coordinator-harness.js";
import { fuzzSurface, millionElementBurst, runsPerSurface, casesPerRun } from "./support/fuzz-surface.js";

let t: TestCoordinator;

beforeAll(async () => {
  t = await startTestCoordinator({ models: [simModel("m")], extra: { inferenceListen: "127.0.0.1:0" } });
  // One instance loaded, so routed calls and state have something to lose.
  await t.inference.predict({ model: "m", options: { Prompt: "warm" } });
});
afterAll(async () => {
  await t.close();
});

/** Everything a hostile burst could change, as the API shows it (times and counters left out). */
async function clusterState() {
  const nodes = (await t.admin.listNodes({})).nodes.map((n) => ({ id: n.nodeId, address: n.address, state: n.state, labels: n.labels, backends: n.backends, embedded: n.embedded, draining: n.draining }));
  const models = (await t.admin.listModels({})).instances.map((i) => ({ node: i.nodeId, model: i.model, state: i.state, address: i.address, incarnation: i.incarnation, inFlight: i.inFlight }));
  const policy = await t.admin.getPolicy({});
  return { nodes, models, policy, watching: t.c.hub.watching };
}

// UpdatePolicy: every patch also sets limit_per_node 99999 (over its maximum), so it is refused whole.
const postfixes = { UpdatePolicy: Uint8Array.of(0x0a, 0x04, 0x08, 0x9f, 0x8d, 0x06) };

describe("hostile bursts at the coordinator's gRPC surfaces", () => {
  it.each([
    ["Admin", () => t.c.address, AdminService],
    ["Inference (main port)", () => t.c.address, InferenceService],
    ["Inference (data-plane listener)", () => t.c.inferenceAddress ?? "", InferenceService],
    ["Node", () => t.c.address, NodeService],
  ] as const)("%s: ≥ 10 000 cases, each a clear status, state unchanged", { timeout: 300_000 }, async (_name, address, svc) => {
    const before = await clusterState();
    const r = await fuzzSurface(address(), svc, postfixes);
    expect(r.cases).toBe(runsPerSurface * casesPerRun);
    expect(r.cases).toBeGreaterThanOrEqual(10_000);
    // The data plane passes Predict through undecoded: there the empty model is refused first (INVALID_ARGUMENT).
    const tried = await millionElementBurst(address(), svc, address() === t.c.inferenceAddress ? [3, 8] : [8]);
    if (svc !== InferenceService) expect(tried.length).toBeGreaterThan(0);
    // Watches and leases opened by the burst end with their calls.
    await expect.poll(async () => await clusterState(), { timeout: 30_000 }).toEqual(before);
    // Still serving: a routed call works.
    expect((await t.inference.predict({ model: "m", options: { Prompt: "after" } })).nodeId).toBe("local");
  });
});
