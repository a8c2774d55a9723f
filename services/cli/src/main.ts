import { runCli } from "./program.js";
import type { Runners } from "./action-context.js";

const io = { out: process.stdout, err: process.stderr, env: process.env, interactive: process.stderr.isTTY };
// The long-running commands load the coordinator, agent or NATS client only when run:
// an admin command or --help stays a small, fast process.
const load = async (): Promise<Runners> => {
  // A service's stack traces name the TypeScript sources (the bundle ships .map files). Not for
  // admin commands: with maps on, Node parses every loaded file's map, as costly as the command.
  process.setSourceMapsEnabled(true);
  return (await import("./runners.js")).runners(io);
};
const runners: Runners = {
  up: async (o) => (await load()).up(o),
  coordinator: async (o) => (await load()).coordinator(o),
  agent: async (args) => (await load()).agent(args),
  natsEvents: async (o, g) => (await load()).natsEvents(o, g),
};
// Long-running commands (up, coordinator) resolve once shut down; `agent` exits the process itself.
process.exit(await runCli(process.argv.slice(2), io, runners));
