import { Gauge, type Registry } from "prom-client";
import type { Loader } from "@warden/loader";

const states = ["waiting", "loading", "failed"] as const;

/**
 * `warden_load_jobs{state}`: the leader's load jobs by state (waiting for a
 * node, loading, failed and still listed). Three series, whatever the models.
 */
export function registerLoadJobMetrics(registry: Registry, loader: Pick<Loader, "loadJobCounts">): void {
  new Gauge({
    name: "warden_load_jobs",
    help: "Load jobs by state: waiting for a node, loading, or failed (kept a bounded time).",
    labelNames: ["state"],
    registers: [registry],
    collect() {
      const c = loader.loadJobCounts();
      for (const state of states) this.set({ state }, c[state]);
    },
  });
}
