import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { ModelReplicasSchema, NodeSchema } from "@warden/proto";
import { blockedText, nodeLimitsTable, replicasTable, rolloutText, scaleText } from "./render-replicas.js";

const replicas = (init: Parameters<typeof create<typeof ModelReplicasSchema>>[1]) => create(ModelReplicasSchema, init);

describe("models ls: replicas per model", () => {
  it("shows ready/desired, min..max and the counts per model", () => {
    const out = replicasTable([replicas({ model: "chat", min: 1, max: 4, desired: 2, ready: 1, loading: 1, stopping: 0, leftovers: 1, queued: 3 }), replicas({ model: "solo", min: 0, max: 1 })]);
    const chat = out.split("\n").find((l) => l.includes("chat")) ?? "";
    expect(chat).toMatch(/chat\s+│\s+1\/2\s+│\s+1\.\.4\s+│\s+1\s+│\s+0\s+│\s+1\s+│\s+3\s+│\s+-/);
    expect(out).toMatch(/solo\s+│\s+0\/0\s+│\s+0\.\.1/);
    expect(out.split("\n")[1]).toMatch(/MODEL\s+│\s+READY\/DESIRED\s+│\s+MIN\.\.MAX/);
    expect(replicasTable([])).toBe("no models configured");
  });

  it("shows an open circuit breaker with its error, failures and retry", () => {
    const b = replicas({ model: "big", min: 2, max: 2, desired: 2, ready: 1, blocked: { error: "no node fits 80GiB", failures: 3, retryAfterMs: 8_000n } });
    expect(blockedText(b)).toBe("blocked: no node fits 80GiB (3 failures, retry in 8s)");
    expect(blockedText(replicas({ model: "x", blocked: { error: "", failures: 1, retryAfterMs: 0n } }))).toBe("blocked: cannot place (1 failure, retry due)");
    expect(replicasTable([b])).toContain("blocked: no node fits 80GiB (3 failures, retry in 8s)");
    expect(scaleText(b)).toBe("big: replicas 2..2 (ready 1/2); blocked: no node fits 80GiB (3 failures, retry in 8s)");
    expect(scaleText(replicas({ model: "m", min: 1, max: 3, desired: 1, loading: 1 }))).toBe("m: replicas 1..3 (ready 0/1, 1 loading)");
  });
});

describe("models ls: a rollout in progress", () => {
  it("shows rolling out current/total in its own column (while some model rolls out) and in models scale's answer", () => {
    const r = replicas({ model: "chat", min: 0, max: 3, desired: 3, ready: 3, rollout: { current: 1, stale: 2, keep: 3 } });
    expect(rolloutText(r)).toBe("rolling out 1/3");
    expect(rolloutText(replicas({ model: "x" }))).toBe("-");
    expect(replicasTable([r]).split("\n")[1]).toMatch(/SCALE-UP\s+│\s+ROLLOUT/);
    expect(replicasTable([r])).toMatch(/chat\s+│.*│\s+-\s+│\s+rolling out 1\/3/);
    expect(scaleText(r)).toBe("chat: replicas 0..3 (ready 3/3); rolling out 1/3");
    // no model rolling out: no column (the table as it always was)
    expect(replicasTable([replicas({ model: "x" })]).split("\n")[1]).not.toMatch(/ROLLOUT/);
  });
});

describe("nodes limits", () => {
  it("shows each effective limit and where it comes from", () => {
    const n = create(NodeSchema, {
      nodeId: "gpu-1",
      agentLimits: { maxReplicasPerModel: 2, memoryBudget: { case: "memoryBudgetBytes", value: 40n << 30n } },
      limitsOverride: { maxReplicasPerModel: 8 },
      effectiveLimits: { maxReplicasPerModel: 8, memoryBudget: { case: "memoryBudgetBytes", value: 40n << 30n } },
    });
    const out = nodeLimitsTable(n);
    expect(out).toMatch(/max replicas per model\s+│\s+8\s+│\s+override; agent: 2/);
    expect(out).toMatch(/memory budget\s+│\s+40GiB\s+│\s+agent config/);
    const none = nodeLimitsTable(create(NodeSchema, { nodeId: "n", effectiveLimits: { maxReplicasPerModel: 1 } }));
    expect(none).toMatch(/max replicas per model\s+│\s+1\s+│\s+default/);
    expect(none).toMatch(/memory budget\s+│\s+whole memory\s+│\s+default/);
    const pct = nodeLimitsTable(create(NodeSchema, { nodeId: "n", limitsOverride: { memoryBudget: { case: "memoryBudgetPercent", value: 80 } }, effectiveLimits: { maxReplicasPerModel: 1, memoryBudget: { case: "memoryBudgetPercent", value: 80 } } }));
    expect(pct).toMatch(/memory budget\s+│\s+80%\s+│\s+override/);
  });
});
