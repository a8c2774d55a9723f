/**
 * The coordinator process. `npm start` runs it with the built-in demo config
 * (coordinator + embedded agent + three backend-sim models, no NATS); with
 * `--config FILE` it runs what the file says. SIGHUP reloads models and
 * policy; SIGINT/SIGTERM stop it — backends are stopped only in `--up` mode
 * (what `warden up` and `npm start` do), never by a plain coordinator.
 */
import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { createLogger, isWardenError } from "@warden/common";
import { parseCoordinatorConfig, type CoordinatorConfig } from "./coordinator-config.js";
import { startCoordinator } from "./coordinator.js";
import { demoConfig } from "./demo-config.js";

const usage = `usage: warden coordinator [--config FILE] [--listen HOST:PORT] [--up] [--log-level LEVEL]

Runs the Warden coordinator: Admin, Inference and Node gRPC services (plus
grpc.health.v1 and reflection), the watchdog, and — unless the config says
embeddedAgent: false — an embedded agent for single-machine mode.

  --config FILE       YAML config; without it the built-in demo config is used
  --listen HOST:PORT  overrides the config's listen address
  --state-dir DIR     overrides the config's stateDir
  --up                single-machine mode: on Ctrl-C stop every backend started
  --log-level LEVEL   pino level (default info)
  -h, --help          this text
`;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      config: { type: "string" },
      listen: { type: "string" },
      "state-dir": { type: "string" },
      up: { type: "boolean", default: false },
      "log-level": { type: "string", default: "info" },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) {
    process.stdout.write(usage);
    return;
  }
  const log = createLogger({ name: "coordinator", level: values["log-level"] });
  const load = async (): Promise<CoordinatorConfig> => {
    const base = values.config === undefined ? demoConfig() : parseCoordinatorConfig(await readFile(values.config, "utf8"));
    return { ...base, ...(values.listen === undefined ? {} : { listen: values.listen }), ...(values["state-dir"] === undefined ? {} : { stateDir: values["state-dir"] }) };
  };
  const config = await load();
  const c = await startCoordinator(config, { logger: log });
  const models = config.models.map((m) => m.id);
  process.stdout.write(
    [
      ``,
      `Warden is running${config.embeddedAgent ? " (coordinator + embedded agent)" : ""}.`,
      `  Admin API      grpc://${c.address}  (warden.v1.AdminService)`,
      `  Inference API  grpc://${c.address}  (warden.v1.InferenceService)`,
      `  Models         ${models.join(", ") || "(none configured)"}`,
      ``,
      `Try, in another terminal:`,
      `  npx warden models ls --addr ${c.address}`,
      `  npx warden predict ${models[0] ?? "<model>"} "hello" --addr ${c.address}`,
      `  npx warden explain ${models[1] ?? models[0] ?? "<model>"} --addr ${c.address}`,
      ``,
      `Ctrl-C stops ${values.up || values.config === undefined ? "Warden and every backend it started" : "the coordinator (backends keep running)"}.`,
      ``,
    ].join("\n"),
  );
  const stopBackends = values.up || values.config === undefined;
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    log.info("shutting down", { signal, stopBackends });
    c.close({ stopBackends }).then(
      () => process.exit(0),
      (err: unknown) => {
        log.error("shutdown failed", { err: err instanceof Error ? err.message : String(err) });
        process.exit(1);
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
}

main().catch((err: unknown) => {
  process.stderr.write(`warden coordinator: ${isWardenError(err) ? err.message : err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
