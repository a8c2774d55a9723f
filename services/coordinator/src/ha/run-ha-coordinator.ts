import { wardenVersion, type Logger } from "@warden/common";
import type { CoordinatorConfig } from "../config/coordinator-config.js";
import { runHaCoordinator } from "./ha-runner.js";

/**
 * `warden coordinator --ha` until SIGINT/SIGTERM: one HA member. SIGHUP
 * reloads the config into the running term (and into the next ones). A
 * takeover that cannot start returns the member to standby (it competes again
 * after a backoff); only a member that cannot serve even as a standby ends
 * the process (exit 1), so a supervisor restarts it. Backends keep running on exit.
 */
export async function serveHaCoordinator(config: CoordinatorConfig, o: { readonly log: Logger; readonly out: NodeJS.WritableStream; readonly load: () => Promise<CoordinatorConfig> }): Promise<number> {
  const r = await runHaCoordinator(config, { logger: o.log });
  o.out.write(
    [
      ``,
      `Warden coordinator (HA member ${r.holder}) is running: standby until it wins the lease.`,
      `  Listen         ${config.listen}  (standbys answer UNAVAILABLE with the leader's address)`,
      `  Advertised     ${r.advertise}`,
      `  NATS           ${config.nats?.url ?? ""}`,
      ...(r.httpUrl() === undefined ? [] : [`  HTTP           ${String(r.httpUrl())}  (OpenAI API, dashboard; standbys answer 503 naming the leader's URL)`]),
      ...(r.metricsAddress === undefined ? [] : [`  Metrics        http://${r.metricsAddress}/metrics`]),
      `  Status         warden ha status --addr ${r.advertise}`,
      ``,
    ].join("\n"),
  );
  o.log.info("ha coordinator running", { version: wardenVersion, holder: r.holder });
  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: string, code: number): void => {
      if (stopping) return;
      stopping = true;
      o.log.info("shutting down", { signal, stopBackends: false });
      r.close().then(
        () => {
          resolve(code);
        },
        (err: unknown) => {
          o.log.error("shutdown failed", { err: err instanceof Error ? err.message : String(err) });
          resolve(1);
        },
      );
    };
    r.failed.catch(() => {
      stop("ha-failure", 1);
    });
    process.on("SIGINT", () => {
      stop("SIGINT", 0);
    });
    process.on("SIGTERM", () => {
      stop("SIGTERM", 0);
    });
    process.on("SIGHUP", () => {
      // A refused reload (config, tokens or certificate file) is logged and the running config kept:
      // caught after the reload too, or its rejection would be unhandled and end the process.
      o.load()
        .then((next) => r.reload(next))
        .catch((err: unknown) => {
          o.log.error("config reload rejected; keeping the running config", { err: err instanceof Error ? err.message : String(err) });
        });
    });
  });
}
