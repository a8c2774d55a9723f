/**
 * ExplainPlacement over real gRPC reports a model's open scale-up circuit
 * breaker ("reported in ListModels and ExplainPlacement"):
 * a min the only node cannot hold (one replica per model there) opens it.
 */
import { afterAll, expect, it } from "vitest";
import { PlacementDecision } from "@warden/proto";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";

let tc: TestCoordinator | undefined;

afterAll(async () => {
  await tc?.close();
});

it("an unsatisfiable min opens the breaker, and ExplainPlacement names it with the ListModels figures", async () => {
  // Few placement retries: the failed load, and so the breaker, come in seconds.
  const t = await startTestCoordinator({ models: [{ ...simModel("m"), replicas: { min: 2, max: 2 } }], policy: { enforcementRetries: 3 } });
  tc = t;
  const ev = await t.waitForEvent("replica.scale-blocked", (e) => e.model === "m", 60_000);
  const s = await until("blocked in ListModels", async () => (await t.admin.listModels({})).replicas.find((r) => r.model === "m" && r.blocked !== undefined));
  expect(s.ready).toBe(1);
  const x = await t.admin.explainPlacement({ model: "m" });
  expect(x.decision).toBe(PlacementDecision.NO_FIT);
  const error = ev.payload.case === "replicaScaleBlocked" ? ev.payload.value.error : "?";
  expect(x.reason).toContain(`; scale-up blocked after ${String(s.blocked?.failures)} failure(s) (${error}), next attempt in `);
});
