import type { Server } from "node:http";
import { servePrometheus } from "@warden/agent";
import { Counter, Gauge, Registry } from "prom-client";

/** What the HA metrics read at scrape time (one owner of each figure: the runner). */
export interface HaMetricsSource {
  isLeader(): boolean;
  quorum(): boolean;
  renewals(): { readonly ok: number; readonly failed: number };
}

/**
 * The HA member's own metrics: `warden_ha_is_leader`,
 * `warden_ha_quorum`, `warden_ha_lease_renewals_total{outcome}`,
 * `warden_ha_takeovers_total`, `warden_ha_takeover_failures_total`. Served on every member, standby too.
 */
export class HaMetrics {
  readonly registry = new Registry();
  readonly takeovers: Counter;
  readonly takeoverFailures: Counter;

  constructor(src: HaMetricsSource) {
    const r = this.registry;
    new Gauge({
      name: "warden_ha_is_leader",
      help: "1 while this coordinator holds the leader lease and acts on it (0 standby or paused).",
      registers: [r],
      collect() {
        this.set(src.isLeader() ? 1 : 0);
      },
    });
    new Gauge({
      name: "warden_ha_quorum",
      help: "1 while this coordinator's last JetStream lease or membership write was acknowledged by a quorum.",
      registers: [r],
      collect() {
        this.set(src.quorum() ? 1 : 0);
      },
    });
    let seen = { ok: 0, failed: 0 };
    new Counter({
      name: "warden_ha_lease_renewals_total",
      help: "Lease renewals this process wrote while leading, by outcome (ok, failed).",
      labelNames: ["outcome"],
      registers: [r],
      collect() {
        const now = src.renewals();
        if (now.ok > seen.ok) this.inc({ outcome: "ok" }, now.ok - seen.ok);
        if (now.failed > seen.failed) this.inc({ outcome: "failed" }, now.failed - seen.failed);
        seen = { ok: now.ok, failed: now.failed };
      },
    });
    this.takeoverFailures = new Counter({ name: "warden_ha_takeover_failures_total", help: "Takeovers that failed to start (state store, journal or a listener): the lease was given up and this member stood by again.", registers: [r] });
    this.takeovers = new Counter({ name: "warden_ha_takeovers_total", help: "Times this process took the lead (resumes in place after a loss of quorum not counted).", registers: [r] });
  }
}

/** `/metrics` over the HA registry and whatever `more()` gives now (the inner coordinator's while it leads). */
export function serveHaMetrics(listen: string, ha: Registry, more: () => readonly Registry[]): Promise<{ readonly server: Server; readonly address: string }> {
  return servePrometheus(() => [ha, ...more()], listen);
}
