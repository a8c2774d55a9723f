import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);

describe("client calls keep no caller stack", () => {
  // grpc-js keeps an Error made when a call starts until the call ends, and with it every frame of
  // the caller's stack and their closures: a long-lived stream kept whatever was on the stack when it
  // began (the coordinator kept each node's finished Register call for the life of its watch stream).
  it("a live stream does not keep what was on the stack when it started", async () => {
    const { stdout } = await run(process.execPath, ["--expose-gc", "--import", "tsx", join(import.meta.dirname, "caller-stack.fixture.ts")], { timeout: 60_000 });
    expect(JSON.parse(stdout.trim().split("\n").pop() ?? "{}")).toEqual({ streamLive: true, markerFreed: true });
  });
});
