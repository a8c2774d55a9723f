/** @warden/cli — the `warden` command. */
export { buildProgram, runCli, eventLine } from "./program.js";
export type { CliIo } from "./program.js";
export { exitCodes, exitCodeOf } from "./exit-codes.js";
export { prettyLogStream } from "./pretty-log.js";
