/**
 * The two steps the agent-kill and agent-pause chaos tests share: waiting until
 * a StopBackend reached the agent's record on disk, and the end of a leftover
 * that blocked its replacement — reaped before the replacement loaded (the
 * group or limit held throughout), then converged with only the replacement,
 * accounted throughout, and the leftover's audit trail complete.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { expect } from "vitest";
import { InstanceState, type LoadModelResponse } from "@warden/proto";
import type { ChaosCluster } from "./chaos-cluster.js";
import { typesOf, untilAuditComplete, untilConverged, type watchAccounting } from "./chaos-checks.js";
import { until } from "./coordinator-harness.js";

/** Waits until the agent's record of `incarnation` (under `stateDir`) says a stop was requested. */
export async function untilStopRecorded(stateDir: string, incarnation: string): Promise<void> {
  await until(
    "the stop request is in the agent's record (on disk)",
    async () => {
      const rec = await readFile(join(stateDir, `${incarnation}.json`), "utf8").catch(() => "{}");
      return (JSON.parse(rec) as { stopRequested?: unknown }).stopRequested != null;
    },
    60_000,
  );
}

/** `leftover` was reaped before `replacement` (model m2) loaded; then converged, accounted throughout, its audit complete. */
export async function expectReapedThenReplaced(c: ChaosCluster, leftover: string, replacement: Promise<LoadModelResponse>, watch: ReturnType<typeof watchAccounting>): Promise<void> {
  const m2 = (await replacement).instance;
  expect(m2?.state).toBe(InstanceState.READY);
  await c.coord.waitForEvent("backend.loaded", (e) => e.model === "m2");
  const types = c.logged().map((e) => `${e.type}:${String(e.model)}`);
  expect(types.indexOf("leftover.reaped:m1")).toBeGreaterThanOrEqual(0);
  expect(types.indexOf("leftover.reaped:m1")).toBeLessThan(types.indexOf("backend.loaded:m2"));

  const end = await untilConverged(c.admin, c.tag, ["a"]);
  const sampled = await watch.stop();
  expect(sampled.problems).toEqual([]);
  expect(sampled.samples).toBeGreaterThan(0);
  expect(end.rows.map((r) => [r.model, r.incarnation])).toEqual([["m2", m2?.incarnation]]);
  const audit = await untilAuditComplete(c.nats.url, () => c.logged());
  // Retries while the agent was away are audited too (eviction.retried); the eviction itself is one started, one failed, one reaped.
  expect(typesOf(audit.events, leftover).filter((t) => t !== "eviction.retried" && t !== "leftover.stuck")).toEqual(["backend.loaded", "eviction.started", "eviction.failed", "leftover.reaped"]);
}
