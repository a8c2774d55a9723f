import { runCli } from "./program.js";
import type { Runners } from "./action-context.js";
import type * as RunnersModule from "./runners.js";

/**
 * The whole `warden` command short of exiting: parses argv, runs the command
 * and resolves with the exit code. `importRunners` loads the long-running
 * commands (coordinator, agent, NATS reader) only when one is run, so an
 * admin command or --help stays a small, fast process: main.ts passes a
 * plain import(), the built bin (services/cli/bin/warden.js) the separately
 * bundled dist/runners.js, since its bundle of this file carries no runner.
 */
export async function startWarden(argv: readonly string[], importRunners: () => Promise<typeof RunnersModule>): Promise<number> {
  const io = { out: process.stdout, err: process.stderr, env: process.env, interactive: process.stderr.isTTY };
  const load = async (): Promise<Runners> => {
    // A service's stack traces name the TypeScript sources (the bundle ships .map files). Not for
    // admin commands: with maps on, Node parses every loaded file's map, as costly as the command.
    process.setSourceMapsEnabled(true);
    return (await importRunners()).runners(io);
  };
  const runners: Runners = {
    up: async (o) => (await load()).up(o),
    coordinator: async (o) => (await load()).coordinator(o),
    agent: async (args) => (await load()).agent(args),
    natsEvents: async (o, g) => (await load()).natsEvents(o, g),
    simulate: async (o) => (await load()).simulate(o),
  };
  // Long-running commands (up, coordinator) resolve once shut down; `agent` exits the process itself.
  const code = await runCli(argv, io, runners);
  await flushed(process.stdout);
  await flushed(process.stderr);
  return code;
}

/**
 * Output to a pipe is written asynchronously, and the caller exits the
 * process next: without this wait a long listing (`nodes ls --json` at a
 * thousand nodes) was cut short for the program reading it.
 */
function flushed(s: NodeJS.WriteStream): Promise<void> {
  if (s.destroyed || s.writableLength === 0) return Promise.resolve();
  return new Promise((resolve) => {
    s.write("", () => {
      resolve();
    });
  });
}
