import { Gauge, type Registry } from "prom-client";
import type { AuditLink } from "@warden/audit";

/**
 * `warden_audit_stream_drift{field,dangerous}`: 1 per way the audit stream's
 * configuration differs from what Warden needs, as found by the audit link's
 * last check (no series when it is fit). Alert on any series: someone with
 * rights the coordinator does not have changed the stream (e.g. capped it
 * with `max_msgs`). Read at scrape time from the link, so nothing to keep in step.
 */
export function registerAuditStreamMetrics(registry: Registry, link: AuditLink): void {
  new Gauge({
    name: "warden_audit_stream_drift",
    help: "Ways the audit stream's configuration differs from what Warden needs (1 per field; dangerous=true: the coordinator does not publish to it).",
    labelNames: ["field", "dangerous"],
    registers: [registry],
    collect() {
      this.reset();
      for (const d of link.streamDrift()) this.set({ field: d.field, dangerous: String(d.dangerous) }, 1);
    },
  });
}
