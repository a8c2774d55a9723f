import { describe, expect, it } from "vitest";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, isWardenError } from "@warden/common";
import { TranscriptLiveRequestSchema } from "@warden/proto";
import { backendPathPlans } from "./backend-path-check.js";
import { PathCheckedRequests } from "./path-checked-requests.js";

const plan = backendPathPlans.get("AudioTranscriptionLive");
const config = (params: Record<string, string>): Uint8Array => toBinary(TranscriptLiveRequestSchema, create(TranscriptLiveRequestSchema, { payload: { case: "config", value: { params } } }));
const audio = toBinary(TranscriptLiveRequestSchema, create(TranscriptLiveRequestSchema, { payload: { case: "audio", value: { pcm: [0.5] } } }));

/** A caller's request stream that records how many messages were pulled from it. */
function source(messages: Uint8Array[]): { pulled: () => number; iterable: AsyncIterable<Uint8Array> } {
  let n = 0;
  return {
    pulled: () => n,
    iterable: (async function* () {
      for (const m of messages) {
        n++;
        yield m;
      }
    })(),
  };
}

describe("PathCheckedRequests", () => {
  if (plan === undefined) throw new Error("AudioTranscriptionLive has no path plan");

  it("a refused first message throws from open(), having read nothing more", async () => {
    const s = source([config({ ref: "/etc/shadow" }), audio]);
    const checked = new PathCheckedRequests(TranscriptLiveRequestSchema, plan, new AbortController().signal);
    const err = await checked.open(s.iterable).catch((e: unknown) => e);
    expect(isWardenError(err, Code.PermissionDenied)).toBe(true);
    expect(s.pulled()).toBe(1);
    expect(checked.signal.aborted).toBe(false);
  });

  it("passes clean messages through in order; a later refused one aborts the call and is kept as the refusal", async () => {
    const first = config({ beam: "5" });
    const s = source([first, audio, config({ ref: "../../x" }), audio]);
    const checked = new PathCheckedRequests(TranscriptLiveRequestSchema, plan, new AbortController().signal);
    const got: Uint8Array[] = [];
    const err = await (async () => {
      for await (const m of await checked.open(s.iterable)) got.push(m);
    })().catch((e: unknown) => e);
    expect(got).toEqual([first, audio]);
    expect(err).toBe(checked.refusal);
    expect(checked.refusal?.details).toEqual({ field: "TranscriptLiveConfig.params" });
    expect(checked.signal.aborted).toBe(true);
  });

  it("the caller's own cancel reaches the call's signal", () => {
    const caller = new AbortController();
    const checked = new PathCheckedRequests(TranscriptLiveRequestSchema, plan, caller.signal);
    caller.abort();
    expect(checked.signal.aborted).toBe(true);
    expect(checked.refusal).toBeUndefined();
  });
});
