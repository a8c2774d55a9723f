import { Counter, Gauge, Registry, collectDefaultMetrics } from "prom-client";
import type { Agent } from "./agent.js";

/**
 * The agent's Prometheus metrics, computed at scrape time from the process
 * table and the last memory reading: backends by state, backends with a stop
 * requested, orphans, foreign processes, GPU and RAM bytes, audit records
 * dropped unreported.
 */
export function createAgentMetrics(agent: Agent): Registry {
  const r = new Registry();
  collectDefaultMetrics({ register: r, prefix: "warden_agent_" });
  new Gauge({
    name: "warden_agent_backends",
    help: "Backend processes by state (spawning, loading, ready, stopping, exited).",
    labelNames: ["state"],
    registers: [r],
    collect() {
      this.reset();
      for (const p of agent.processes()) this.inc({ state: p.state });
    },
  });
  new Gauge({
    name: "warden_agent_stop_requested_backends",
    help: "Backends with a recorded stop request that are not gone yet.",
    registers: [r],
    async collect() {
      const inv = await agent.inventory();
      this.set(inv.backends.filter((b) => b.stopRequested !== undefined).length);
    },
  });
  new Gauge({
    name: "warden_agent_orphans",
    help: "Live processes in the port range without a complete record.",
    registers: [r],
    async collect() {
      this.set((await agent.inventory()).orphans.length);
    },
  });
  new Gauge({
    name: "warden_agent_foreign_processes",
    help: "Processes listening in the port range that this agent did not start (last scan); never signalled, their ports skipped.",
    registers: [r],
    collect() {
      this.set(agent.foreign().length);
    },
  });
  new Gauge({
    name: "warden_agent_memory_bytes",
    help: "Memory by device (GPU index, or ram) and kind (total, used).",
    labelNames: ["device", "kind"],
    registers: [r],
    async collect() {
      this.reset();
      const m = await agent.nodeResources();
      for (const g of m.gpus ?? []) {
        this.set({ device: String(g.index ?? 0), kind: "total" }, Number(g.totalBytes ?? 0n));
        this.set({ device: String(g.index ?? 0), kind: "used" }, Number(g.usedBytes ?? 0n));
      }
      this.set({ device: "ram", kind: "total" }, Number(m.ramTotalBytes ?? 0n));
      this.set({ device: "ram", kind: "used" }, Number(m.ramUsedBytes ?? 0n));
    },
  });
  new Counter({
    name: "warden_agent_audit_dropped_total",
    help: "Audit records dropped before any coordinator acknowledged them (kind: pull = artifact.pulled, bundle-install = backend.installed by a start); the agent's log has each.",
    labelNames: ["kind"],
    registers: [r],
    collect() {
      this.reset();
      const d = agent.auditDropped();
      this.inc({ kind: "pull" }, d.pulls);
      this.inc({ kind: "bundle-install" }, d.bundleInstalls);
    },
  });
  return r;
}
