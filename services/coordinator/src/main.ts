/**
 * The coordinator process: `node --import tsx services/coordinator/src/main.ts`.
 * The operator's entry point is the `warden` CLI (`warden up`, `warden
 * coordinator`); this file stays for running the service directly.
 */
import { parseArgs } from "node:util";
import { isWardenError } from "@warden/common";
import { runCoordinator } from "./run-coordinator.js";

const usage = `usage: node --import tsx services/coordinator/src/main.ts [--config FILE] [--listen HOST:PORT] [--state-dir DIR] [--up] [--log-level LEVEL]

Runs the Warden coordinator: Admin, Inference and Node gRPC services (plus
grpc.health.v1 and reflection), the watchdog, and — unless the config says
embeddedAgent: false — an embedded agent for single-machine mode.

  --config FILE       YAML config; without it the built-in demo config is used
  --listen HOST:PORT  overrides the config's listen address
  --state-dir DIR     overrides the config's stateDir
  --up                single-machine mode: on Ctrl-C stop every backend started
  --insecure          allow plaintext gRPC on a non-loopback address (else set tls in the config)
  --ha                run as an HA member (leader lease on NATS JetStream; the config's ha: or defaults)
  --nats-url URLS     comma-separated NATS cluster URLs (overrides nats.url)
  --log-level LEVEL   pino level (default info)
  -h, --help          this text
`;

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      config: { type: "string" },
      listen: { type: "string" },
      "state-dir": { type: "string" },
      up: { type: "boolean", default: false },
      insecure: { type: "boolean", default: false },
      ha: { type: "boolean", default: false },
      "nats-url": { type: "string" },
      "log-level": { type: "string", default: "info" },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) {
    process.stdout.write(usage);
    return 0;
  }
  return runCoordinator({ config: values.config, listen: values.listen, stateDir: values["state-dir"], up: values.up, insecure: values.insecure, ha: values.ha, natsUrl: values["nats-url"], logLevel: values["log-level"] });
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`warden coordinator: ${isWardenError(err) ? err.message : err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
