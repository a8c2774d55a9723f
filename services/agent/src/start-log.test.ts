import { describe, expect, it } from "vitest";
import { StartFailureCode } from "@warden/proto";
import { StartLog, type StartEvent } from "./start-log.js";

async function all(it: AsyncIterable<StartEvent>): Promise<string[]> {
  const out: string[] = [];
  for await (const e of it) out.push(e.t);
  return out;
}

describe("start log", () => {
  it("replays from the start to late followers and ends at the terminal event", async () => {
    const log = new StartLog();
    const early = all(log.follow(new AbortController().signal));
    log.append({ t: "spawned", address: "a:1", pid: 1, gpuDevice: "", bootEpochMs: 0, heartbeatSequence: 0n });
    log.append({ t: "loading" });
    const late = all(log.follow(new AbortController().signal));
    log.append({ t: "failed", code: StartFailureCode.LOAD_FAILED, message: "x", exitCode: undefined, lastStderrLine: "" });
    log.append({ t: "loading" }); // ignored after terminal
    expect(await early).toEqual(["spawned", "loading", "failed"]);
    expect(await late).toEqual(["spawned", "loading", "failed"]);
    expect(log.terminal()).toBe(true);
  });

  it("stops following when the follower's signal aborts", async () => {
    const log = new StartLog();
    const ctl = new AbortController();
    const p = all(log.follow(ctl.signal)).catch((e: unknown) => e);
    ctl.abort();
    expect(await p).toBeInstanceOf(Error);
  });
});
