import { Counter, Gauge, type Registry } from "prom-client";
import type { Event } from "@warden/proto";
import type { Loader } from "@warden/loader";
import { perScrape } from "../per-scrape.js";

const states = ["ready", "loading", "stopping", "leftover"] as const;
const scaleKinds: Readonly<Partial<Record<NonNullable<Event["payload"]["case"]>, string>>> = {
  replicaScaledUp: "scaled-up",
  replicaScaledDown: "scaled-down",
  replicaScaleBlocked: "scale-blocked",
};

/**
 * Per-model replica metrics. Labels are bounded: only configured
 * models (at most `maxModels`) appear, so an event naming anything else
 * cannot grow a series.
 */
export class ReplicaMetrics {
  private readonly scaleEvents: Counter<"model" | "kind">;

  constructor(registry: Registry, private readonly loader: Pick<Loader, "replicaStatuses" | "modelSpec">) {
    // One walk of every model's replicas per scrape, shared by the three gauges.
    const statuses = perScrape(() => loader.replicaStatuses());
    new Gauge({
      name: "warden_model_replicas",
      help: "Replicas of each configured model by state (ready, loading, stopping, leftover).",
      labelNames: ["model", "state"],
      registers: [registry],
      collect() {
        this.reset();
        for (const s of statuses()) {
          const by = { ready: s.ready, loading: s.loading, stopping: s.stopping, leftover: s.leftovers };
          for (const state of states) this.set({ model: s.model, state }, by[state]);
        }
      },
    });
    new Gauge({
      name: "warden_model_replicas_desired",
      help: "Replicas the reconciler aims for, per configured model (min <= desired <= max).",
      labelNames: ["model"],
      registers: [registry],
      collect() {
        this.reset();
        for (const s of statuses()) this.set({ model: s.model }, s.desired);
      },
    });
    new Gauge({
      name: "warden_model_queue_depth",
      help: "Calls waiting because no replica of the model is ready.",
      labelNames: ["model"],
      registers: [registry],
      collect() {
        this.reset();
        for (const s of statuses()) this.set({ model: s.model }, s.queued);
      },
    });
    this.scaleEvents = new Counter({ name: "warden_replica_scale_events_total", help: "Replica scale events per configured model (scaled-up, scaled-down, scale-blocked).", labelNames: ["model", "kind"], registers: [registry] });
  }

  /** Counts a committed replica.* event of a configured model. */
  observe(e: Event): void {
    const kind = e.payload.case === undefined ? undefined : scaleKinds[e.payload.case];
    if (kind === undefined || this.loader.modelSpec(e.model) === undefined) return;
    this.scaleEvents.inc({ model: e.model, kind });
  }
}
