/**
 * The surfaces over real loopback gRPC against a real coordinator
 * (with its embedded agent): node placement limits from Register (hostile
 * values refused whole, nothing changed) and from the embedded agent's
 * config; SetNodeLimits overrides that survive re-registration; ScaleModel
 * (validated whole, audited as replica.scale-set) and the replica summary
 * in ListModels, metrics, and the CLI (`models scale`, `models ls`,
 * `nodes limits`, run in process over the same real gRPC).
 */
import { PassThrough } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "@warden/cli";
import { createClient, type Client } from "@warden/grpc";
import { Code } from "@warden/common";
import { eventTypeOf } from "@warden/events";
import { NodeService, type Node } from "@warden/proto";
import { simModel, startTestCoordinator, type TestCoordinator } from "./support/coordinator-harness.js";
import { refusal } from "./support/refusal.js";

let tc: TestCoordinator;
let nc: Client<typeof NodeService>;

beforeAll(async () => {
  tc = await startTestCoordinator({
    models: [{ ...simModel("m"), replicas: { min: 0, max: 2, targetInFlight: 2, scaleDownAfter: "1m" } }, simModel("solo")],
    agent: { maxReplicasPerModel: 3, memoryBudget: "80%" },
    extra: { metricsListen: "127.0.0.1:0" },
  });
  nc = createClient(NodeService, tc.c.address);
}, 60_000);

afterAll(async () => {
  nc.close();
  await tc.close();
});

const bootEpoch = 1_750_000_000_000n;
// Nothing listens on port 1: the coordinator's WatchBackends to this node just fails and retries.
const address = "127.0.0.1:1";

async function node(id: string): Promise<Node> {
  const n = (await tc.admin.getNode({ nodeId: id })).node;
  if (n === undefined) throw new Error(`no node ${id}`);
  return n;
}

/** A node's three limit views, compactly. */
function limitsOf(n: Node): Record<string, unknown> {
  const l = (x: Node["agentLimits"]) => ({ max: x?.maxReplicasPerModel, budget: x?.memoryBudget.case === undefined ? undefined : `${x.memoryBudget.case}=${String(x.memoryBudget.value)}` });
  return { agent: l(n.agentLimits), override: l(n.limitsOverride), effective: l(n.effectiveLimits) };
}

describe("node placement limits", () => {
  it("the embedded agent registers its config's maxReplicasPerModel and memoryBudget", async () => {
    expect(limitsOf(await node("local"))).toEqual({
      agent: { max: 3, budget: "memoryBudgetPercent=80" },
      override: { max: undefined, budget: undefined },
      effective: { max: 3, budget: "memoryBudgetPercent=80" },
    });
  });

  it("a Register with hostile limits is refused whole naming the field, for a new node and for a known one, and changes nothing", async () => {
    await nc.register({ nodeId: "gpu-a", address, bootEpoch, limits: { maxReplicasPerModel: 2, memoryBudget: { case: "memoryBudgetBytes", value: 40n << 30n } } });
    const before = limitsOf(await node("gpu-a"));
    expect(before).toEqual({ agent: { max: 2, budget: `memoryBudgetBytes=${String(40n << 30n)}` }, override: { max: undefined, budget: undefined }, effective: { max: 2, budget: `memoryBudgetBytes=${String(40n << 30n)}` } });
    const hostile: [Parameters<typeof nc.register>[0]["limits"], string][] = [
      [{ maxReplicasPerModel: 0 }, "limits.max_replicas_per_model"],
      [{ maxReplicasPerModel: 1025 }, "limits.max_replicas_per_model"],
      [{ maxReplicasPerModel: 4_294_967_295 }, "limits.max_replicas_per_model"],
      [{ memoryBudget: { case: "memoryBudgetBytes", value: 0n } }, "limits.memory_budget_bytes"],
      [{ memoryBudget: { case: "memoryBudgetBytes", value: 2n ** 64n - 1n } }, "limits.memory_budget_bytes"],
      [{ memoryBudget: { case: "memoryBudgetPercent", value: 0 } }, "limits.memory_budget_percent"],
      [{ memoryBudget: { case: "memoryBudgetPercent", value: 100.5 } }, "limits.memory_budget_percent"],
      [{ memoryBudget: { case: "memoryBudgetPercent", value: Number.NaN } }, "limits.memory_budget_percent"],
      [{ memoryBudget: { case: "memoryBudgetPercent", value: -Infinity } }, "limits.memory_budget_percent"],
      // A valid field beside a bad one: the whole Register is refused.
      [{ maxReplicasPerModel: 4, memoryBudget: { case: "memoryBudgetPercent", value: 101 } }, "limits.memory_budget_percent"],
    ];
    for (const [limits, field] of hostile) {
      expect(await refusal(nc.register({ nodeId: "gpu-a", address, bootEpoch: bootEpoch + 1n, labels: { changed: "yes" }, limits })), field).toMatchObject({ code: Code.InvalidArgument, field });
      expect(await refusal(nc.register({ nodeId: "gpu-new", address, bootEpoch, limits })), field).toMatchObject({ code: Code.InvalidArgument, field });
    }
    const after = await node("gpu-a");
    expect(limitsOf(after)).toEqual(before);
    expect(after.bootEpoch).toBe(bootEpoch);
    expect(after.labels).toEqual({});
    expect(tc.c.nodes.get("gpu-new")).toBeUndefined();
  });

  it("SetNodeLimits overrides field by field, is validated whole, survives the agent's re-registration and clears", async () => {
    await nc.register({ nodeId: "gpu-b", address, bootEpoch, limits: { maxReplicasPerModel: 2 } });
    const r = await tc.admin.setNodeLimits({ nodeId: "gpu-b", limits: { memoryBudget: { case: "memoryBudgetPercent", value: 50 } } });
    expect(r.node === undefined ? undefined : limitsOf(r.node)).toEqual({ agent: { max: 2, budget: undefined }, override: { max: undefined, budget: "memoryBudgetPercent=50" }, effective: { max: 2, budget: "memoryBudgetPercent=50" } });
    // The fields set replace the override's; the others keep theirs.
    await tc.admin.setNodeLimits({ nodeId: "gpu-b", limits: { maxReplicasPerModel: 8 } });
    const set = limitsOf(await node("gpu-b"));
    expect(set).toEqual({ agent: { max: 2, budget: undefined }, override: { max: 8, budget: "memoryBudgetPercent=50" }, effective: { max: 8, budget: "memoryBudgetPercent=50" } });
    expect(tc.c.nodes.limitsOf("gpu-b")).toEqual({ maxReplicasPerModel: 8, memoryBudget: { t: "percent", percent: 50 } });

    const bad: [Parameters<typeof tc.admin.setNodeLimits>[0], number, string][] = [
      [{ nodeId: "gpu-b", limits: { maxReplicasPerModel: 1025 } }, Code.InvalidArgument, "limits.max_replicas_per_model"],
      [{ nodeId: "gpu-b", limits: { maxReplicasPerModel: 4, memoryBudget: { case: "memoryBudgetPercent", value: 0 } } }, Code.InvalidArgument, "limits.memory_budget_percent"],
      [{ nodeId: "gpu-b", limits: { memoryBudget: { case: "memoryBudgetBytes", value: 0n } } }, Code.InvalidArgument, "limits.memory_budget_bytes"],
      [{ nodeId: "gpu-b", clear: true, limits: { maxReplicasPerModel: 4 } }, Code.InvalidArgument, "clear"],
      [{ nodeId: "gpu-b" }, Code.InvalidArgument, "limits"],
      [{ nodeId: "", limits: { maxReplicasPerModel: 4 } }, Code.InvalidArgument, "node_id"],
    ];
    for (const [req, code, field] of bad) expect(await refusal(tc.admin.setNodeLimits(req)), field).toMatchObject({ code, field });
    expect((await refusal(tc.admin.setNodeLimits({ nodeId: "nobody", limits: { maxReplicasPerModel: 4 } }))).code).toBe(Code.NotFound);
    expect(limitsOf(await node("gpu-b"))).toEqual(set);

    // The agent restarts (a new boot epoch) with other limits: its own are replaced, the override stays.
    await nc.register({ nodeId: "gpu-b", address, bootEpoch: bootEpoch + 7n, limits: { maxReplicasPerModel: 1, memoryBudget: { case: "memoryBudgetBytes", value: 1n << 30n } } });
    expect(limitsOf(await node("gpu-b"))).toEqual({ agent: { max: 1, budget: `memoryBudgetBytes=${String(1n << 30n)}` }, override: { max: 8, budget: "memoryBudgetPercent=50" }, effective: { max: 8, budget: "memoryBudgetPercent=50" } });
    const listed = (await tc.admin.listNodes({})).nodes.find((n) => n.nodeId === "gpu-b");
    expect(listed?.effectiveLimits?.maxReplicasPerModel).toBe(8);

    await tc.admin.setNodeLimits({ nodeId: "gpu-b", clear: true });
    expect(limitsOf(await node("gpu-b"))).toEqual({ agent: { max: 1, budget: `memoryBudgetBytes=${String(1n << 30n)}` }, override: { max: undefined, budget: undefined }, effective: { max: 1, budget: `memoryBudgetBytes=${String(1n << 30n)}` } });
    // No limits at all: the effective view shows the default of one replica per model.
    await nc.register({ nodeId: "gpu-c", address, bootEpoch });
    expect(limitsOf(await node("gpu-c"))).toEqual({ agent: { max: undefined, budget: undefined }, override: { max: undefined, budget: undefined }, effective: { max: 1, budget: undefined } });
  });
});

describe("ScaleModel and the replica summary", () => {
  it("ListModels has one replica summary per configured model, from the config", async () => {
    const r = await tc.admin.listModels({});
    expect(r.replicas.map((x) => [x.model, x.min, x.max, x.targetInFlight, x.scaleDownAfterMs, x.blocked])).toEqual([
      ["m", 0, 2, 2, 60_000n, undefined],
      ["solo", 0, 1, 4, 300_000n, undefined],
    ]);
  });

  it("sets min/max live, audited as replica.scale-set; a refused call changes nothing and emits nothing", async () => {
    const r = await tc.admin.scaleModel({ model: "m", max: 5, operator: "alice" });
    expect(r.replicas).toMatchObject({ model: "m", min: 0, max: 5 });
    const ev = await tc.waitForEvent("replica.scale-set", (e) => e.model === "m");
    expect(ev.payload).toMatchObject({ case: "replicaScaleSet", value: { operator: "alice", min: 0, max: 5 } });
    expect((await tc.admin.listModels({})).replicas.find((x) => x.model === "m")).toMatchObject({ min: 0, max: 5 });

    const scaleSets = (): number => tc.events.filter((e) => eventTypeOf(e) === "replica.scale-set").length;
    const n = scaleSets();
    const bad: [Parameters<typeof tc.admin.scaleModel>[0], number, string][] = [
      [{ model: "m", min: 6 }, Code.InvalidArgument, "min"],
      [{ model: "m", max: 0 }, Code.InvalidArgument, "max"],
      [{ model: "m", min: 1025, max: 1025 }, Code.InvalidArgument, "min"],
      [{ model: "m", max: 1025 }, Code.InvalidArgument, "max"],
      [{ model: "m" }, Code.InvalidArgument, "min"],
      [{ model: "m", max: 3, operator: "x".repeat(257) }, Code.InvalidArgument, "operator"],
      [{ model: "", max: 3 }, Code.InvalidArgument, "model"],
    ];
    for (const [req, code, field] of bad) expect(await refusal(tc.admin.scaleModel(req)), field).toMatchObject({ code, field });
    expect((await refusal(tc.admin.scaleModel({ model: "nope", max: 3 }))).code).toBe(Code.NotFound);
    expect((await tc.admin.listModels({})).replicas.find((x) => x.model === "m")).toMatchObject({ min: 0, max: 5 });
    expect(scaleSets()).toBe(n);
  });

  it("metrics: per-model replica gauges for the configured models only", async () => {
    const text = await (await fetch(`http://${tc.c.metricsAddress ?? ""}/metrics`)).text();
    expect(text).toMatch(/warden_model_replicas\{model="m",state="ready"\} 0/);
    expect(text).toMatch(/warden_model_replicas\{model="solo",state="leftover"\} 0/);
    expect(text).toMatch(/warden_model_replicas_desired\{model="m"\} \d+/);
    expect(text).toMatch(/warden_model_queue_depth\{model="solo"\} 0/);
    expect(text).toMatch(/# TYPE warden_replica_scale_events_total counter/);
  });
});

/** `warden …` in process (its gRPC client is real); exit code and output. */
async function warden(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = new PassThrough();
  const err = new PassThrough();
  let stdout = "";
  let stderr = "";
  out.on("data", (b: Buffer) => (stdout += b.toString()));
  err.on("data", (b: Buffer) => (stderr += b.toString()));
  const noRunner = (): Promise<number> => Promise.reject(new Error("not in this test"));
  const code = await runCli([...args, ...(args.includes("--help") ? [] : ["--addr", tc.c.address])], { out, err, env: {}, interactive: false }, { up: noRunner, coordinator: noRunner, agent: noRunner, natsEvents: noRunner, simulate: () => Promise.resolve("") });
  return { code, stdout, stderr };
}

describe("CLI: models scale, models ls replicas, nodes limits", () => {
  it("models scale sets the bounds; bad values are exit 2 naming the field, an unknown model exit 4", async () => {
    const ok = await warden(["models", "scale", "solo", "--min", "0", "--max", "3", "--operator", "bob"]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/^solo: replicas 0\.\.3 \(ready 0\/\d+\)/);
    expect((await tc.waitForEvent("replica.scale-set", (e) => e.model === "solo")).payload).toMatchObject({ value: { operator: "bob", min: 0, max: 3 } });
    const bad = await warden(["models", "scale", "solo", "--min", "4"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/min/);
    expect((await warden(["models", "scale", "solo"])).code).toBe(2);
    expect((await warden(["models", "scale", "solo", "--max", "-1"])).code).toBe(2);
    expect((await warden(["models", "scale", "nope", "--max", "2"])).code).toBe(4);
    const ls = await warden(["models", "ls"]);
    expect(ls.code, ls.stderr).toBe(0);
    expect(ls.stdout).toMatch(/solo\s+│\s+0\/\d+\s+│\s+0\.\.3\s+│/);
    expect(ls.stdout).toMatch(/MODEL\s+│\s+READY\/DESIRED\s+│\s+MIN\.\.MAX/);
  });

  it("nodes limits shows, overrides and clears; bad flags are exit 2, an unknown node exit 4", async () => {
    await nc.register({ nodeId: "gpu-cli", address, bootEpoch, limits: { maxReplicasPerModel: 2 } });
    const set = await warden(["nodes", "limits", "gpu-cli", "--max-replicas-per-model", "4", "--memory-budget", "80%"]);
    expect(set.code, set.stderr).toBe(0);
    expect(set.stdout).toMatch(/max replicas per model\s+│\s+4\s+│\s+override; agent: 2/);
    expect(set.stdout).toMatch(/memory budget\s+│\s+80%\s+│\s+override/);
    expect(tc.c.nodes.limitsOverride("gpu-cli")).toEqual({ maxReplicasPerModel: 4, memoryBudget: { t: "percent", percent: 80 } });
    const show = await warden(["nodes", "limits", "gpu-cli"]);
    expect(show.code).toBe(0);
    expect(show.stdout).toMatch(/max replicas per model\s+│\s+4/);
    for (const args of [["--clear", "--memory-budget", "1GiB"], ["--memory-budget", "120%"], ["--max-replicas-per-model", "0"], ["--max-replicas-per-model", "2000"]]) {
      expect((await warden(["nodes", "limits", "gpu-cli", ...args])).code, args.join(" ")).toBe(2);
    }
    expect(tc.c.nodes.limitsOverride("gpu-cli")).toEqual({ maxReplicasPerModel: 4, memoryBudget: { t: "percent", percent: 80 } });
    expect((await warden(["nodes", "limits", "nobody", "--clear"])).code).toBe(4);
    const cleared = await warden(["nodes", "limits", "gpu-cli", "--clear"]);
    expect(cleared.code).toBe(0);
    expect(cleared.stdout).toMatch(/max replicas per model\s+│\s+2\s+│\s+agent config/);
    expect(tc.c.nodes.limitsOverride("gpu-cli")).toEqual({});
  });

  it("--help of the new commands exits 0", async () => {
    for (const cmd of [["models", "scale"], ["nodes", "limits"]]) {
      const r = await warden([...cmd, "--help"]);
      expect(r.code, cmd.join(" ")).toBe(0);
      expect(r.stdout).toMatch(/Usage: warden/);
    }
  });
});
