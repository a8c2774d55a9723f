#!/usr/bin/env node
// The `warden` command: registers tsx so the TypeScript sources run as they are
// (the workspace packages export .ts), then hands over to src/main.ts.
import { register } from "tsx/esm/api";

register();
await import("../src/main.ts");
