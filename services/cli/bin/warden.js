#!/usr/bin/env node
// The `warden` command: runs the ahead-of-time build in ../dist (no TypeScript
// loader). In a checkout (../build exists) it first makes sure that build is
// current, rebuilding it if a source changed; an installed package has no
// ../build and goes straight to the bundle.
import { existsSync } from "node:fs";

const fresh = new URL("../build/fresh.mjs", import.meta.url);
if (existsSync(fresh)) {
  const { ensureFreshBuild } = await import(fresh.href);
  await ensureFreshBuild();
}
// Source maps are enabled by the long-running commands only (services/cli/src/main.ts):
// Node parses each loaded file's map when they are on, which would double a short command's time.
await import("../dist/warden.js");
