import { runCli } from "./program.js";
import { runners } from "./runners.js";

const io = { out: process.stdout, err: process.stderr, env: process.env, interactive: process.stderr.isTTY };
// Long-running commands (up, coordinator) resolve once shut down; `agent` exits the process itself.
process.exit(await runCli(process.argv.slice(2), io, runners(io)));
