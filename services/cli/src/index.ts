/** @warden/cli — the `warden` command. */
export { buildProgram, runCli } from "./program.js";
export { eventLine } from "./admin-actions.js";
export type { CliIo, Runners } from "./action-context.js";
export { exitCodes, exitCodeOf } from "./exit-codes.js";
export { parseAddr } from "./addr.js";
export { prettyLogStream } from "./pretty-log.js";
