import { describe, expect, it } from "vitest";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, WardenError, isWardenError, seededRng } from "@warden/common";
import { encodingOf } from "@warden/grpc";
import { ExplainPlacementResponseSchema, PlacementDecision } from "@warden/proto";
import { encodedExplanation } from "./explain-encoding.js";
import { WorkSlicer } from "./work-slicer.js";

type Verdict = { nodeId: string; fits: boolean; reason: string; freeBytes: bigint; score: number; wouldEvict: string[] };

/** `n` verdicts of every shape: short and long reasons (a length over 127 takes two bytes), no and many evictions, zero and large numbers. */
function verdicts(n: number, seed: number): Verdict[] {
  const rng = seededRng(seed);
  return Array.from({ length: n }, (_, i) => ({
    nodeId: `node-${String(i)}`,
    fits: rng.next() < 0.5,
    reason: "x".repeat(Math.floor(rng.next() * 400)),
    freeBytes: i % 3 === 0 ? 0n : BigInt(Math.floor(rng.next() * 2 ** 50)),
    score: i % 4 === 0 ? 0 : rng.next() * 1e6 - 5e5,
    wouldEvict: Array.from({ length: Math.floor(rng.next() * 4) }, (_, k) => `m${String(k)}@inc-${String(i)}`),
  }));
}

describe("encodedExplanation", () => {
  it.each([0, 1, 300, 1000])("its bytes are exactly the whole message's encoding, and decode to it (%i nodes)", async (n) => {
    const list = verdicts(n, n + 1);
    const head = { decision: PlacementDecision.NO_FIT, nodeId: n === 1 ? "node-0" : "", reason: `no node fits (${String(n)} judged)` };
    // The fields after the nodes (a page's token and the counts) are encoded after them, as in the whole message.
    const tail = n === 0 ? {} : { nextPageToken: `token-${String(n)}`, nodesTotal: n * 10, nodesFit: n, nodesFitAfterEviction: 300 };
    const answer = await encodedExplanation(head, list.length, (i) => list[i] as Verdict, undefined, tail);
    const bytes = encodingOf(answer);
    expect(bytes).toBeDefined();
    const whole = toBinary(ExplainPlacementResponseSchema, create(ExplainPlacementResponseSchema, { ...head, nodes: list, ...tail }));
    expect(Buffer.compare(Buffer.from(whole), bytes ?? Buffer.alloc(0))).toBe(0);
    expect(fromBinary(ExplainPlacementResponseSchema, bytes ?? new Uint8Array())).toEqual(answer);
    expect(answer.nodes.map((v) => v.nodeId)).toEqual(list.map((v) => v.nodeId));
    expect(Object.isFrozen(answer)).toBe(true);
  });

  it("encodes in the slicer's slices, yielding between chunks of nodes, and stops when the caller is gone", async () => {
    const list = verdicts(3000, 7);
    let ms = 0;
    // Each look at the clock is a millisecond of work: a 1 ms slice holds one chunk.
    const slicer = new WorkSlicer({ sliceMs: 1, nowMs: () => ms++ });
    await encodedExplanation({ decision: PlacementDecision.PLACE, nodeId: "node-3", reason: "r" }, list.length, (i) => list[i] as Verdict, slicer);
    expect(slicer.yields).toBeGreaterThan(10);
    const ctl = new AbortController();
    const slicer2 = new WorkSlicer({ sliceMs: 1, nowMs: () => ms++, signal: ctl.signal });
    let made = 0;
    const p = encodedExplanation({ decision: PlacementDecision.PLACE, nodeId: "node-3", reason: "r" }, list.length, (i) => {
      made++;
      if (made === 300) ctl.abort(new WardenError(Code.DeadlineExceeded, "call deadline exceeded"));
      return list[i] as Verdict;
    }, slicer2);
    const err = await p.then(() => undefined, (e: unknown) => e);
    expect(isWardenError(err, Code.DeadlineExceeded)).toBe(true);
    expect(made).toBeLessThan(list.length);
  });
});
