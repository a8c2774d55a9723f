import { startWarden } from "./start.js";

// `warden` from the sources (tsx) and dist/warden.js; the installed bin runs the same startWarden
// from a CommonJS bundle with a V8 code cache (see services/cli/bin/warden.js).
process.exit(await startWarden(process.argv.slice(2), () => import("./runners.js")));
