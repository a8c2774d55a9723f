import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import type { Event } from "@warden/proto";
import { EvictionFailedOutcome, EvictionReason } from "@warden/proto";
import type { Loader } from "@warden/loader";
import type { Outbox } from "@warden/outbox";
import type { NodeRegistry } from "./nodes/node-registry.js";
import { ReplicaMetrics } from "./admin/replica-metrics.js";
import { registerLoadJobMetrics } from "./admin/load-job-metrics.js";
import { perScrape } from "./per-scrape.js";
import { SeriesGauge } from "./series-gauge.js";
import { liveHeapBytes } from "./live-heap.js";

function reasonName(r: EvictionReason): string {
  return EvictionReason[r].toLowerCase();
}

/**
 * The coordinator's Prometheus metrics. Gauges are computed at scrape time
 * from the loader and registry (no second bookkeeping to drift); counters are
 * fed by committed events. Names follow Prometheus conventions: `_total` for
 * counters, base units (seconds, bytes).
 */
export class CoordinatorMetrics {
  readonly registry = new Registry();
  private readonly evictions: Counter<"reason" | "outcome">;
  private readonly failedStops: Counter<"reason">;
  private readonly loadSeconds: Histogram;
  private readonly loadFailures: Counter;
  readonly routedCalls: Counter<"outcome">;
  private readonly stuck: Counter;
  private readonly journalRepairs: Counter;
  private readonly journalDroppedBytes: Counter;
  private readonly journalDroppedRecords: Counter;
  private readonly replicas: ReplicaMetrics;

  constructor(loader: Loader, nodes: NodeRegistry, outbox: Outbox) {
    const r = this.registry;
    collectDefaultMetrics({ register: r, prefix: "warden_coordinator_" });
    liveHeapBytes(); // observe from the start: the first scrape already has a figure after a collection
    new Gauge({
      name: "warden_coordinator_heap_live_bytes",
      help: "V8 heap in use right after the last major garbage collection: what the coordinator holds (RSS and heap used also count garbage not yet collected).",
      registers: [r],
      collect() {
        this.set(liveHeapBytes());
      },
    });
    // Every instance counted once per scrape, by node and state and calls in flight by node, shared by the two
    // gauges; no view per instance (at 10 000 nodes × 10 a scrape made 100 000 of them).
    const perNode = perScrape(() => {
      const states: [string, Partial<Record<string, number>>][] = [];
      const inFlight: [string, number][] = [];
      loader.core.forEachNodeCount((node, counts, calls) => {
        states.push([node, counts]);
        inFlight.push([node, calls]);
      });
      return { states, inFlight };
    });
    new SeriesGauge({ name: "warden_instances", help: "Instances by node and state (loading, ready, freed, pending, leftover, orphan).", labelNames: ["node", "state"], registers: [r] }, () => {
      // Leftovers and orphans are states of their own (no instance series to add them to).
      const leftovers = new Map<string, number>();
      for (const l of loader.leftoverList()) leftovers.set(l.nodeId, (leftovers.get(l.nodeId) ?? 0) + 1);
      const out: { value: number; labels: { node: string; state: string } }[] = [];
      for (const [node, byState] of perNode().states) for (const state in byState) out.push({ value: byState[state] ?? 0, labels: { node, state } });
      for (const [node, n] of leftovers) out.push({ value: n, labels: { node, state: "leftover" } });
      for (const n of nodes.list()) if (n.orphans.length > 0) out.push({ value: n.orphans.length, labels: { node: n.nodeId, state: "orphan" } });
      return out;
    });
    new SeriesGauge({ name: "warden_in_flight_requests", help: "Calls in flight, by node.", labelNames: ["node"], registers: [r] }, () => perNode().inFlight.map(([node, n]) => ({ value: n, labels: { node } })));
    new Gauge({
      name: "warden_leftovers",
      help: "Leftover instances (stop failed after the local half was dropped), by stuck flag.",
      labelNames: ["stuck"],
      registers: [r],
      collect() {
        this.reset();
        this.set({ stuck: "false" }, 0);
        this.set({ stuck: "true" }, 0);
        for (const l of loader.leftoverList()) this.inc({ stuck: String(l.stuck) });
      },
    });
    new Gauge({
      name: "warden_nodes",
      help: "Registered nodes by health state.",
      labelNames: ["state"],
      registers: [r],
      collect() {
        this.reset();
        for (const s of ["ready", "unreachable", "lost"]) this.set({ state: s }, 0);
        for (const n of nodes.list()) this.inc({ state: n.state });
      },
    });
    new Gauge({
      name: "warden_outbox_depth",
      help: "Audit events accepted but not yet acknowledged by NATS.",
      registers: [r],
      collect() {
        this.set(outbox.stats().depth);
      },
    });
    new Gauge({
      name: "warden_outbox_dropped",
      help: "Audit events refused because the outbox was full (never silent).",
      registers: [r],
      collect() {
        this.set(outbox.stats().dropped);
      },
    });
    this.evictions = new Counter({ name: "warden_evictions_total", help: "Settled evictions by reason and outcome (stopped, registered-again, leftover).", labelNames: ["reason", "outcome"], registers: [r] });
    this.failedStops = new Counter({ name: "warden_failed_stops_total", help: "Stops that failed, by eviction reason.", labelNames: ["reason"], registers: [r] });
    this.loadSeconds = new Histogram({ name: "warden_load_duration_seconds", help: "Time from admission to ready.", buckets: [0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600], registers: [r] });
    this.loadFailures = new Counter({ name: "warden_load_failures_total", help: "Loads that failed.", registers: [r] });
    this.routedCalls = new Counter({ name: "warden_routed_calls_total", help: "Inference calls by outcome (ok or the gRPC code name).", labelNames: ["outcome"], registers: [r] });
    this.stuck = new Counter({ name: "warden_leftovers_stuck_total", help: "Leftovers flagged stuck (still retried).", registers: [r] });
    // Alert on any increase: a repair may have dropped an acknowledged record.
    this.journalRepairs = new Counter({ name: "warden_journal_repairs_total", help: "Torn journal tails cut off at start (journal.repaired events).", registers: [r] });
    this.journalDroppedBytes = new Counter({ name: "warden_journal_repaired_bytes_total", help: "Bytes cut off torn journal tails at start.", registers: [r] });
    this.journalDroppedRecords = new Counter({ name: "warden_journal_repaired_records_total", help: "Records (whole or partial) in torn journal tails cut off at start.", registers: [r] });
    this.replicas = new ReplicaMetrics(r, loader);
    registerLoadJobMetrics(r, loader);
  }

  /** Feeds counters from a committed event. */
  observe(e: Event): void {
    this.replicas.observe(e);
    switch (e.payload.case) {
      case "evictionStopped":
        this.evictions.inc({ reason: reasonName(e.payload.value.reason), outcome: "stopped" });
        break;
      case "evictionFailed":
        this.evictions.inc({ reason: reasonName(e.payload.value.reason), outcome: e.payload.value.outcome === EvictionFailedOutcome.LEFTOVER ? "leftover" : "registered-again" });
        this.failedStops.inc({ reason: reasonName(e.payload.value.reason) });
        break;
      case "backendLoaded":
        this.loadSeconds.observe(Number(e.payload.value.loadDurationMs) / 1000);
        break;
      case "backendLoadFailed":
        this.loadFailures.inc();
        break;
      case "leftoverStuck":
        this.stuck.inc();
        break;
      case "journalRepaired":
        this.journalRepairs.inc();
        this.journalDroppedBytes.inc(Number(e.payload.value.droppedBytes));
        this.journalDroppedRecords.inc(e.payload.value.droppedRecords);
        break;
      default:
        break;
    }
  }
}
