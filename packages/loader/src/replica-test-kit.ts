import { modelSpec, type ModelSpec, type ReplicaSettings } from "./model-spec.js";
import { createHarness, defaultModels, type Harness, type HarnessOptions } from "./test-fakes.js";
import type { Lease } from "./loader-types.js";
import type { FakeBackend } from "./fake-ports.js";

/** m1 with the given replica settings (other models as in the default harness). Not exported from the package. */
export function replicaModels(replicas: Partial<ReplicaSettings>, extra: Partial<ModelSpec> = {}): ModelSpec[] {
  return defaultModels().map((m) => (m.id === "m1" ? modelSpec({ id: "m1", backend: "sim", replicas: { min: 0, max: 1, targetInFlight: 4, scaleDownAfterMs: 300_000, ...replicas }, ...extra }) : m));
}

export function replicaHarness(replicas: Partial<ReplicaSettings>, o: HarnessOptions = {}, extra: Partial<ModelSpec> = {}): Harness {
  return createHarness({ ...o, models: replicaModels(replicas, extra) });
}

/** Incarnations of m1's ready, not pending replicas in the watchdog. */
export function readyReplicas(h: Harness, model = "m1"): string[] {
  return h.loader.core
    .instancesOfModel(model)
    .filter((v) => v.state === "ready" && v.pendingEviction === undefined)
    .map((v) => v.incarnation);
}

/** In-flight count per incarnation among leases. */
export function split(leases: readonly Lease<FakeBackend>[]): Map<string, number> {
  const m = new Map<string, number>();
  for (const l of leases) m.set(l.incarnation, (m.get(l.incarnation) ?? 0) + 1);
  return m;
}

/** Brings m1 to two ready replicas, on n1 then n2, by load (targetInFlight must be 1); returns their incarnations. Leases are completed. */
export async function twoReplicas(h: Harness): Promise<[string, string]> {
  h.placement.route.set("m1", "n1");
  const a = await h.loader.acquire("m1", h.never);
  h.placement.route.set("m1", "n2");
  const b = await h.loader.acquire("m1", h.never); // at target: starts the scale-up, goes to a
  await h.until(() => readyReplicas(h).length === 2);
  a.complete();
  b.complete();
  const [x, y] = readyReplicas(h);
  if (x === undefined || y === undefined) throw new Error("two replicas expected");
  return [x, y];
}
