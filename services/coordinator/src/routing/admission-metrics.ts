import { Counter, Gauge, type Registry } from "prom-client";
import { priorityClasses } from "@warden/admission";
import type { AdmissionGate } from "./admission-gate.js";

/**
 * The admission gate on /metrics: calls waiting per model and class, calls in
 * flight through the gate, refusals (RESOURCE_EXHAUSTED / 429) per model and
 * class. Read at scrape time from the gate; only models with calls in their
 * gate now (or refused since start) have series.
 */
export function registerAdmissionMetrics(registry: Registry, gate: AdmissionGate): void {
  new Gauge({
    name: "warden_admission_waiting",
    help: "Calls waiting in a model's admission queue, by priority class.",
    labelNames: ["model", "class"],
    registers: [registry],
    collect() {
      this.reset();
      for (const d of gate.depths()) for (const cls of priorityClasses) this.set({ model: d.model, class: cls }, d.waiting[cls]);
    },
  });
  new Gauge({
    name: "warden_admission_in_flight",
    help: "Calls admitted through a model's admission gate and not finished.",
    labelNames: ["model"],
    registers: [registry],
    collect() {
      this.reset();
      for (const d of gate.depths()) this.set({ model: d.model }, d.inFlight);
    },
  });
  new Counter({
    name: "warden_admission_refused_total",
    help: "Calls refused by a model's admission gate (sheddable past shedAtQueued, a caller past its share, a full queue), by priority class.",
    labelNames: ["model", "class"],
    registers: [registry],
    collect() {
      this.reset();
      for (const r of gate.refused()) this.inc({ model: r.model, class: r.cls }, r.count);
    },
  });
}
