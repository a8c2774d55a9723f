import { describe, expect, it } from "vitest";
import { Registry } from "prom-client";
import { create } from "@bufbuild/protobuf";
import { EventSchema } from "@warden/proto";
import { defaultReplicas, modelSpec, type ReplicaStatus } from "@warden/loader";
import { ReplicaMetrics } from "./replica-metrics.js";

const status = (model: string, over: Partial<ReplicaStatus> = {}): ReplicaStatus => ({ model, settings: defaultReplicas, desired: 1, ready: 1, loading: 0, stopping: 0, leftovers: 0, queued: 0, blocked: undefined, ...over });

function metrics(statuses: ReplicaStatus[]): { registry: Registry; m: ReplicaMetrics } {
  const registry = new Registry();
  const configured = new Set(statuses.map((s) => s.model));
  const m = new ReplicaMetrics(registry, { replicaStatuses: () => statuses, modelSpec: (id) => (configured.has(id) ? modelSpec({ id, backend: "sim" }) : undefined) });
  return { registry, m };
}

describe("replica metrics", () => {
  it("gauges per configured model: replicas by state, desired, queue depth", async () => {
    const { registry } = metrics([status("chat", { desired: 3, ready: 2, loading: 1, stopping: 1, leftovers: 1, queued: 5 }), status("solo")]);
    const text = await registry.metrics();
    expect(text).toContain('warden_model_replicas{model="chat",state="ready"} 2');
    expect(text).toContain('warden_model_replicas{model="chat",state="loading"} 1');
    expect(text).toContain('warden_model_replicas{model="chat",state="stopping"} 1');
    expect(text).toContain('warden_model_replicas{model="chat",state="leftover"} 1');
    expect(text).toContain('warden_model_replicas_desired{model="chat"} 3');
    expect(text).toContain('warden_model_queue_depth{model="chat"} 5');
    expect(text).toContain('warden_model_replicas{model="solo",state="ready"} 1');
  });

  it("counts scale events by kind for configured models only (bounded labels)", async () => {
    const { registry, m } = metrics([status("chat")]);
    const ev = (model: string, payload: Parameters<typeof create<typeof EventSchema>>[1] extends infer I ? I extends { payload?: infer P } ? P : never : never) => create(EventSchema, { model, payload });
    m.observe(ev("chat", { case: "replicaScaledUp", value: { cause: "in-flight", replicas: 2 } }));
    m.observe(ev("chat", { case: "replicaScaledUp", value: { cause: "min", replicas: 3 } }));
    m.observe(ev("chat", { case: "replicaScaledDown", value: { replicas: 2 } }));
    m.observe(ev("chat", { case: "replicaScaleBlocked", value: { error: "no fit", failures: 1 } }));
    m.observe(ev("unconfigured-1", { case: "replicaScaledUp", value: { cause: "min", replicas: 1 } }));
    m.observe(ev("chat", { case: "replicaScaleSet", value: { operator: "a", min: 1, max: 2 } }));
    const text = await registry.metrics();
    expect(text).toContain('warden_replica_scale_events_total{model="chat",kind="scaled-up"} 2');
    expect(text).toContain('warden_replica_scale_events_total{model="chat",kind="scaled-down"} 1');
    expect(text).toContain('warden_replica_scale_events_total{model="chat",kind="scale-blocked"} 1');
    expect(text).not.toContain("unconfigured-1");
    expect(text.match(/warden_replica_scale_events_total\{/g)).toHaveLength(3);
  });
});
