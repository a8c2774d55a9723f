import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);

describe("heartbeatStream memory", () => {
  // An open stream must not keep the heartbeats it already answered: racing each request against
  // one promise that lives as long as the stream kept every one of them (one a second per node), and
  // an async generator's suspended frame kept the last one until the next arrived — a second later,
  // promoted out of the young generation by then, for every node.
  it("keeps none of the answered heartbeats of a stream that stays open, neither their bytes nor the messages decoded from them", async () => {
    const { stdout } = await run(process.execPath, ["--expose-gc", "--import", "tsx", join(import.meta.dirname, "heartbeat-stream-retention.fixture.ts")], { timeout: 60_000 });
    const r = JSON.parse(stdout.trim().split("\n").pop() ?? "{}") as { beats: number; tracked: number; reachable: number; pushedAnswered: number; pushedPromises: number; pushedFailure: string | null };
    expect(r.beats).toBe(200);
    // Each heartbeat's bytes and the message decoded from them.
    expect(r.tracked).toBe(400);
    expect(r.reachable).toBe(0);
    // Driven by events, as the server drives it: every heartbeat answered, and not one promise made for
    // them — nothing is left waiting for the next message (a pulled chain leaves several per message).
    expect({ answered: r.pushedAnswered, promises: r.pushedPromises, failure: r.pushedFailure }).toEqual({ answered: 200, promises: 0, failure: null });
  });
});
