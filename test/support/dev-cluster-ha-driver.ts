/**
 * Runs `npm run cluster -- --ha`'s HA part (runHaDevCluster) without agents,
 * for the dev-cluster smoke test: argv is `<listen> <httpListen>`. Prints the
 * banner on stdout; SIGTERM stops what it started (coordinators, nats-servers)
 * and exits. The members' own output goes to stderr.
 */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ChildProcess } from "node:child_process";
import { repoRootPath } from "../../services/agent/src/backend-sim-catalog.js";
import { runHaDevCluster } from "../../services/cli/src/dev-cluster-ha.js";

const cliMain = fileURLToPath(new URL("../../services/cli/src/main.ts", import.meta.url));
const [listen, httpListen] = process.argv.slice(2);
if (listen === undefined || httpListen === undefined) throw new Error("usage: dev-cluster-ha-driver <listen> <httpListen>");
const dir = await mkdtemp(join(tmpdir(), "warden-dev-cluster-ha-"));
const prefix = (name: string, p: ChildProcess): void => {
  for (const s of [p.stdout, p.stderr]) s?.on("data", (b: Buffer) => process.stderr.write(`[${name}] ${b.toString()}`));
};
const code = await runHaDevCluster({
  dir,
  root: repoRootPath,
  wardenArgs: ["--import", "tsx", cliMain],
  listen,
  httpListen,
  coordinatorYaml: (l, stateDir) => `listen: ${l}\nstateDir: ${stateDir}\nembeddedAgent: false\nmodels:\n  - id: m\n    backend: backend-sim\n`,
  startAgents: () => Promise.resolve([]),
  prefix,
});
if (code !== 0) process.exit(code);
