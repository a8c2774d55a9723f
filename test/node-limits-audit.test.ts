/**
 * SetNodeLimits is audited (`node.limits-set`): a real coordinator
 * publishing to a real nats-server, read back from JetStream by a durable
 * subscriber. A refused SetNodeLimits publishes nothing and changes nothing:
 * shown by a later accepted call being the next one on the stream.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "@warden/common";
import { connectAudit, subscribeAuditEvents, type AuditDelivery } from "@warden/audit";
import type { NatsConnection } from "@nats-io/transport-node";
import type { NodeLimits, NodeLimitsSet } from "@warden/proto";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { startNatsServer, type NatsServerHandle } from "./support/nats-server.js";
import { refusal } from "./support/refusal.js";

let nats: NatsServerHandle;
let tc: TestCoordinator;
let nc: NatsConnection;
const ctl = new AbortController();
const seen: AuditDelivery[] = [];
let reading: Promise<void>;

beforeAll(async () => {
  nats = await startNatsServer();
  tc = await startTestCoordinator({ models: [simModel("m")], agent: { maxReplicasPerModel: 2 }, extra: { nats: { url: nats.url } } });
  nc = await connectAudit({ servers: nats.url, reconnectTimeWaitMs: 100, name: "node-limits-audit-test" });
  reading = (async () => {
    for await (const d of subscribeAuditEvents(nc, { durable: "limits-reader", filter: { types: ["node.limits-set"] }, signal: ctl.signal })) seen.push(d);
  })();
}, 60_000);

afterAll(async () => {
  ctl.abort();
  await reading.catch(() => undefined);
  await nc.close().catch(() => undefined);
  await tc.close();
  await nats.dispose();
});

/** A NodeLimits as a compact value: max replicas and the budget. */
function compact(l: NodeLimits | undefined): { max: number | undefined; budget: string | undefined } {
  return { max: l?.maxReplicasPerModel, budget: l?.memoryBudget.case === undefined ? undefined : `${l.memoryBudget.case}=${String(l.memoryBudget.value)}` };
}

function limitsSet(d: AuditDelivery): Record<string, unknown> {
  if (d.event.payload.case !== "nodeLimitsSet") throw new Error(`not node.limits-set: ${d.type}`);
  const v: NodeLimitsSet = d.event.payload.value;
  return { previousOverride: compact(v.previousOverride), override: compact(v.override), previousEffective: compact(v.previousEffective), effective: compact(v.effective), cleared: v.cleared, operator: v.operator };
}

describe("SetNodeLimits audit (node.limits-set) on a real nats-server", () => {
  it("publishes the old and new limits under warden.events.node.limits-set.<node>._; a refused call publishes nothing and changes nothing", async () => {
    await tc.admin.setNodeLimits({ nodeId: "local", limits: { maxReplicasPerModel: 4, memoryBudget: { case: "memoryBudgetPercent", value: 50 } }, operator: "ops-alice" });
    const [first] = await until("the first node.limits-set on JetStream", () => (seen.length >= 1 ? seen : undefined));
    if (first === undefined) throw new Error("unreachable");
    expect(first.subject).toBe("warden.events.node.limits-set.local._");
    expect(first.type).toBe("node.limits-set");
    expect(first.event).toMatchObject({ nodeId: "local", model: "", incarnation: "" });
    expect(limitsSet(first)).toEqual({
      previousOverride: { max: undefined, budget: undefined },
      override: { max: 4, budget: "memoryBudgetPercent=50" },
      previousEffective: { max: 2, budget: undefined },
      effective: { max: 4, budget: "memoryBudgetPercent=50" },
      cleared: false,
      operator: "ops-alice",
    });
    // WatchEvents carries the same event.
    expect((await tc.waitForEvent("node.limits-set")).id).toBe(first.event.id);

    const before = (await tc.admin.getNode({ nodeId: "local" })).node;
    const bad: [Parameters<typeof tc.admin.setNodeLimits>[0], number, string][] = [
      [{ nodeId: "local", limits: { maxReplicasPerModel: 1025 } }, Code.InvalidArgument, "limits.max_replicas_per_model"],
      // A valid field beside a bad one: refused whole.
      [{ nodeId: "local", limits: { maxReplicasPerModel: 3, memoryBudget: { case: "memoryBudgetBytes", value: 0n } } }, Code.InvalidArgument, "limits.memory_budget_bytes"],
      [{ nodeId: "local", clear: true, limits: { maxReplicasPerModel: 3 } }, Code.InvalidArgument, "clear"],
      [{ nodeId: "local" }, Code.InvalidArgument, "limits"],
      [{ nodeId: "", limits: { maxReplicasPerModel: 3 } }, Code.InvalidArgument, "node_id"],
      [{ nodeId: "local", limits: { maxReplicasPerModel: 3 }, operator: "x".repeat(257) }, Code.InvalidArgument, "operator"],
      [{ nodeId: "local", limits: { maxReplicasPerModel: 3 }, operator: "bob\n" }, Code.InvalidArgument, "operator"],
    ];
    for (const [req, code, field] of bad) expect(await refusal(tc.admin.setNodeLimits(req)), field).toMatchObject({ code, field });
    expect((await refusal(tc.admin.setNodeLimits({ nodeId: "nobody", limits: { maxReplicasPerModel: 3 } }))).code).toBe(Code.NotFound);
    const after = (await tc.admin.getNode({ nodeId: "local" })).node;
    expect([compact(after?.limitsOverride), compact(after?.effectiveLimits)]).toEqual([compact(before?.limitsOverride), compact(before?.effectiveLimits)]);
    expect(tc.c.nodes.limitsOf("local")).toEqual({ maxReplicasPerModel: 4, memoryBudget: { t: "percent", percent: 50 } });

    // The next accepted call (a clear) is the next node.limits-set on the stream:
    // none of the refused calls published one in between.
    await tc.admin.setNodeLimits({ nodeId: "local", clear: true });
    const all = await until("the clear's node.limits-set on JetStream", () => (seen.length >= 2 ? seen : undefined));
    await until("outbox drained to JetStream", () => tc.c.outbox.stats().depth === 0 || undefined);
    expect(all).toHaveLength(2);
    expect(all[1]?.streamSequence).toBeGreaterThan(first.streamSequence);
    expect(all[1] === undefined ? undefined : limitsSet(all[1])).toEqual({
      previousOverride: { max: 4, budget: "memoryBudgetPercent=50" },
      override: { max: undefined, budget: undefined },
      previousEffective: { max: 4, budget: "memoryBudgetPercent=50" },
      effective: { max: 2, budget: undefined },
      cleared: true,
      operator: "",
    });
    expect(tc.events.filter((e) => e.payload.case === "nodeLimitsSet").map((e) => e.id)).toEqual(all.map((d) => d.event.id));
  });
});
