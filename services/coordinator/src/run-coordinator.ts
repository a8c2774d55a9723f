/**
 * Runs a coordinator process until SIGINT/SIGTERM: used by `npm start`,
 * `warden up` and `warden coordinator`. `up` mode (single machine) stops every
 * backend it started on exit; a plain coordinator never stops backends
 * (DESIGN §2). SIGHUP reloads models and policy.
 */
import { readFile } from "node:fs/promises";
import { createLogger } from "@warden/common";
import { parseCoordinatorConfig, type CoordinatorConfig } from "./coordinator-config.js";
import { startCoordinator } from "./coordinator.js";
import { demoConfig } from "./demo-config.js";

export interface RunCoordinatorOptions {
  /** YAML config path; undefined = the built-in demo config. */
  readonly config?: string | undefined;
  readonly listen?: string | undefined;
  readonly stateDir?: string | undefined;
  /** host:port for Prometheus `/metrics`; overrides the config. */
  readonly metricsListen?: string | undefined;
  /** Single-machine mode: stop every backend on exit. */
  readonly up: boolean;
  /** @default "info" */
  readonly logLevel?: string | undefined;
  /** Where logs go (a pretty printer for terminals); stdout JSON by default. */
  readonly logDestination?: NodeJS.WritableStream | undefined;
  /** Where the banner goes. @default process.stdout */
  readonly out?: NodeJS.WritableStream;
  /** Command prefix shown in the banner. @default "npx warden" */
  readonly cliName?: string;
}

/** Starts the coordinator and resolves with the exit code once it has shut down. */
export async function runCoordinator(o: RunCoordinatorOptions): Promise<number> {
  const out = o.out ?? process.stdout;
  const cli = o.cliName ?? "npx warden";
  const log = createLogger({ name: "coordinator", level: o.logLevel ?? "info", ...(o.logDestination === undefined ? {} : { destination: o.logDestination }) });
  const load = async (): Promise<CoordinatorConfig> => {
    const base = o.config === undefined ? demoConfig() : parseCoordinatorConfig(await readFile(o.config, "utf8"));
    return { ...base, ...(o.listen === undefined ? {} : { listen: o.listen }), ...(o.stateDir === undefined ? {} : { stateDir: o.stateDir }), ...(o.metricsListen === undefined ? {} : { metricsListen: o.metricsListen }) };
  };
  const config = await load();
  const c = await startCoordinator(config, { logger: log });
  const models = config.models.map((m) => m.id);
  out.write(
    [
      ``,
      `Warden is running${config.embeddedAgent ? " (coordinator + embedded agent)" : ""}.`,
      `  Admin API      ${c.address}  (warden.v1.AdminService, gRPC)`,
      `  Inference API  ${c.address}  (warden.v1.InferenceService, gRPC)`,
      ...(c.inferenceAddress === undefined ? [] : [`  Data plane     ${c.inferenceAddress}  (warden.v1.InferenceService only, lean HTTP/2 gRPC)`]),
      `  Models         ${models.join(", ") || "(none configured)"}`,
      ...(c.metricsAddress === undefined ? [] : [`  Metrics        http://${c.metricsAddress}/metrics`]),
      ``,
      `Try, in another terminal:`,
      `  ${cli} models ls --addr ${c.address}`,
      `  ${cli} predict ${models[0] ?? "<model>"} "hello" --addr ${c.address}`,
      `  ${cli} explain ${models[1] ?? models[0] ?? "<model>"} --addr ${c.address}`,
      ``,
      `Ctrl-C stops ${o.up ? "Warden and every backend it started" : "the coordinator (backends keep running)"}.`,
      ``,
    ].join("\n"),
  );
  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: string): void => {
      if (stopping) return;
      stopping = true;
      log.info("shutting down", { signal, stopBackends: o.up });
      c.close({ stopBackends: o.up }).then(
        () => {
          resolve(0);
        },
        (err: unknown) => {
          log.error("shutdown failed", { err: err instanceof Error ? err.message : String(err) });
          resolve(1);
        },
      );
    };
    process.on("SIGINT", () => {
      stop("SIGINT");
    });
    process.on("SIGTERM", () => {
      stop("SIGTERM");
    });
    process.on("SIGHUP", () => {
      load().then(
        (next) => c.reload(next),
        (err: unknown) => {
          log.error("config reload rejected; keeping the running config", { err: err instanceof Error ? err.message : String(err) });
        },
      );
    });
  });
}
