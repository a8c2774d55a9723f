import type { Fixture } from "./watchdog-fixture.js";

// LocalAI's `Enforce(n)` maps to n loading instances already registered on the
// node (its pendingLoads): the LocalAI scenario tests drive enforcement this way.

/** Registers `n` loading instances on n1 (LocalAI's pendingLoads). */
function loadingInstances(f: Fixture, n: number): void {
  for (let i = 0; i < n; i++) f.core.registerLoading({ nodeId: "n1", model: `pending-${i}`, incarnation: `pl-${i}-${f.clock.now()}`, address: `pl:${i}` });
}

/** LocalAI's `Enforce(pendingLoads)` on n1. */
export async function enforceLimit(f: Fixture, pendingLoads = 0): Promise<{ evicted: number; needMore: boolean }> {
  loadingInstances(f, pendingLoads);
  return f.svc.enforceLimit("n1");
}
