import { WardenError, type Cancel, type Clock } from "@warden/common";
import type { ClientTls } from "@warden/grpc";
import { createClient, type Client } from "@warden/grpc";
import { Backend } from "@warden/proto";

/** A backend the monitor may check. */
export interface MonitoredBackend {
  incarnation: string;
  address: string;
  /** Set for a backend that serves TLS (its catalog entry's tls). */
  tls?: ClientTls;
}

export interface HealthMonitorOptions {
  clock: Clock;
  /** Period of the checks; 0 disables the monitor. */
  intervalMs: number;
  /** Timeout of one Health call. */
  timeoutMs: number;
  /** The backends to check now (the ready ones). */
  list(): MonitoredBackend[];
  /** Called on every change of a backend's health, and on its first failure. */
  onChange(incarnation: string, healthy: boolean, detail: string): void;
  /** Metadata for every Health call (the backends' bearer token), when set. */
  headers?: Readonly<Record<string, string>>;
}

/**
 * Polls Health of ready backends and reports changes only (healthy →
 * unhealthy and back): WatchBackends `health` events. DEADLINE_EXCEEDED
 * (busy or stuck) and UNAVAILABLE (gone) are both "unhealthy", with the
 * status in the detail so a watcher can tell them apart.
 */
export class HealthMonitor {
  private readonly healthy = new Map<string, boolean>();
  private readonly clients = new Map<string, Client<typeof Backend>>();
  private cancel: Cancel = () => {};
  private stopped = false;

  constructor(private readonly options: HealthMonitorOptions) {}

  start(): void {
    if (this.options.intervalMs <= 0) return;
    this.schedule();
  }

  stop(): void {
    this.stopped = true;
    this.cancel();
    for (const c of this.clients.values()) c.close();
    this.clients.clear();
  }

  private schedule(): void {
    if (this.stopped) return;
    this.cancel = this.options.clock.setTimer(this.options.intervalMs, () => {
      void this.checkAll().finally(() => {
        this.schedule();
      });
    });
  }

  /** One round of checks (exposed for tests). */
  async checkAll(): Promise<void> {
    const list = this.options.list();
    const live = new Set(list.map((b) => b.incarnation));
    for (const [inc, c] of this.clients) {
      if (!live.has(inc)) {
        c.close();
        this.clients.delete(inc);
        this.healthy.delete(inc);
      }
    }
    await Promise.all(
      list.map(async (b) => {
        let client = this.clients.get(b.incarnation);
        if (client === undefined) {
          client = createClient(Backend, b.address, { ...(b.tls === undefined ? {} : { tls: b.tls }), ...(this.options.headers === undefined ? {} : { headers: this.options.headers }) });
          this.clients.set(b.incarnation, client);
        }
        let ok = true;
        let detail = "";
        try {
          await client.health({}, { timeoutMs: this.options.timeoutMs });
        } catch (err) {
          ok = false;
          detail = WardenError.from(err).message;
        }
        const before = this.healthy.get(b.incarnation);
        this.healthy.set(b.incarnation, ok);
        // a backend starts out healthy (it answered readiness): report changes only
        if ((before ?? true) !== ok) this.options.onChange(b.incarnation, ok, detail);
      }),
    );
  }
}
