import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { Code, ManualClock, WardenError } from "@warden/common";
import { FindPeersResponseSchema, type FindPeersResponse } from "@warden/proto";
import { recordingLogger } from "../../../test/support/recording-logger.js";
import { coordinatorPeerFinder, peerAnswerWaitMs, type FindPeersCall } from "./peer-finder.js";

const a = "a".repeat(64);
const b = "b".repeat(64);
const peer = { nodeId: "holder", address: "127.0.0.1:7000", ticket: "f".repeat(64), expiresAtMs: 1_700_000_300_000n };

/** A FindPeers call that sends `answer` (or fails with it) and then stays open until its signal aborts; `signals` holds each call's. */
function fakeCall(answer: FindPeersResponse | WardenError | "silent"): { call: FindPeersCall; signals: AbortSignal[] } {
  const signals: AbortSignal[] = [];
  const call: FindPeersCall = (_req, o) => {
    signals.push(o.signal);
    return (async function* () {
      const ended = new Promise<void>((resolve) => {
        o.signal.addEventListener("abort", () => { resolve(); }, { once: true });
      });
      if (answer instanceof WardenError) throw answer;
      if (answer !== "silent") yield answer;
      await ended;
      throw new WardenError(Code.Canceled, "cancelled");
    })();
  };
  return { call, signals };
}

describe("coordinatorPeerFinder", () => {
  it("names each digest's peers from the first answer and ends the call on release (the coordinator frees the slots then)", async () => {
    const f = fakeCall(create(FindPeersResponseSchema, { artifacts: [{ sha256: a, peers: [peer] }, { sha256: b, peers: [] }] }));
    const find = coordinatorPeerFinder({ nodeId: "me", call: f.call, clock: new ManualClock(), logger: recordingLogger() });
    const lease = await find([a, b], new AbortController().signal);
    expect(lease.peers.get(a)).toEqual([{ nodeId: "holder", address: "127.0.0.1:7000", ticket: "f".repeat(64), expiresAtMs: 1_700_000_300_000 }]);
    expect(lease.peers.get(b)).toEqual([]);
    expect(f.signals[0]?.aborted).toBe(false);
    lease.release();
    expect(f.signals[0]?.aborted).toBe(true);
  });

  it("a coordinator without FindPeers, a refusal, a malformed or a late answer: no peers (the origin), never a failed pull", async () => {
    const cases: [string, FindPeersResponse | WardenError | "silent", RegExp][] = [
      ["unimplemented", new WardenError(Code.Unimplemented, "no FindPeers here"), /no FindPeers here/],
      ["refused", new WardenError(Code.FailedPrecondition, 'node_id: "me" is not registered'), /not registered/],
      ["not asked", create(FindPeersResponseSchema, { artifacts: [{ sha256: b, peers: [peer] }] }), /which was not asked/],
      ["bad ticket", create(FindPeersResponseSchema, { artifacts: [{ sha256: a, peers: [{ ...peer, ticket: "x" }] }] }), /artifacts\[0\]\.peers\[0\]\.ticket/],
      ["late", "silent", new RegExp(`within ${String(peerAnswerWaitMs)} ms`)],
    ];
    for (const [what, answer, why] of cases) {
      const f = fakeCall(answer);
      const clock = new ManualClock();
      const logger = recordingLogger();
      const pending = coordinatorPeerFinder({ nodeId: "me", call: f.call, clock, logger })([a], new AbortController().signal);
      if (answer === "silent") {
        await Promise.resolve();
        clock.advance(peerAnswerWaitMs);
      }
      const lease = await pending;
      expect(lease.peers.size, what).toBe(0);
      expect(f.signals[0]?.aborted, what).toBe(true);
      expect(logger.matching("info", /no peers for a pull/).map((l) => String(l.meta.err)), what).toEqual([expect.stringMatching(why)]);
    }
  });

  it("asks nothing for no digests, and the caller's own abort is the caller's error", async () => {
    const f = fakeCall("silent");
    const find = coordinatorPeerFinder({ nodeId: "me", call: f.call, clock: new ManualClock(), logger: recordingLogger() });
    expect((await find([], new AbortController().signal)).peers.size).toBe(0);
    expect(f.signals).toHaveLength(0);
    const ac = new AbortController();
    const pending = find([a], ac.signal);
    ac.abort(new WardenError(Code.Canceled, "the start gave up"));
    await expect(pending).rejects.toThrow("the start gave up");
  });
});
