import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { fenceStaleRecords, judgeStreamHead, type EpochStampedRecord } from "./epoch-fence.js";
import type { JournalRecord } from "./journal-record.js";

const intent = (incarnation: string): JournalRecord => ({ kind: "stop-intent", incarnation, nodeId: "n", model: "m", address: "a", reason: "lru", recordedAtMs: 0 });
const at = (writerEpoch: bigint | undefined, record: JournalRecord): EpochStampedRecord => ({ writerEpoch, record });

describe("fenceStaleRecords (replay rule)", () => {
  it("drops a record of epoch e written after a marker of epoch e' > e", () => {
    const r = fenceStaleRecords([at(4n, intent("a")), at(7n, { kind: "epoch", epoch: 100n }), at(4n, intent("stale")), at(7n, intent("b"))]);
    expect(r.records.map((x) => (x.kind === "stop-intent" ? x.incarnation : x.kind))).toEqual(["a", "epoch", "b"]);
    expect(r.stale).toBe(1);
    expect(r.newestEpoch).toBe(7n);
  });

  it("keeps unstamped records (written before the fence) and every record of a non-decreasing log", () => {
    const r = fenceStaleRecords([at(undefined, intent("old")), at(2n, intent("a")), at(undefined, intent("u")), at(2n, intent("b")), at(3n, intent("c"))]);
    expect(r.records).toHaveLength(5);
    expect(r.stale).toBe(0);
  });

  it("property: what it keeps is non-decreasing in epoch, and it drops exactly the records below an earlier epoch", () => {
    fc.assert(
      fc.property(fc.array(fc.option(fc.bigInt({ min: 1n, max: 6n }), { nil: undefined }), { maxLength: 40 }), (epochs) => {
        const entries = epochs.map((e, i) => at(e, intent(String(i))));
        const r = fenceStaleRecords(entries);
        const kept = new Set(r.records);
        let max: bigint | undefined;
        let expectedStale = 0;
        for (const e of entries) {
          if (e.writerEpoch === undefined) {
            expect(kept.has(e.record)).toBe(true);
            continue;
          }
          const stale = max !== undefined && e.writerEpoch < max;
          expect(kept.has(e.record)).toBe(!stale);
          if (stale) expectedStale++;
          else max = e.writerEpoch;
        }
        expect(r.stale).toBe(expectedStale);
      }),
    );
  });
});

describe("judgeStreamHead (retry rule)", () => {
  const chainIds = ["w-1", "w-2", "w-3"];
  it("our own record at the head: stored up to it", () => {
    expect(judgeStreamHead({ head: { id: "w-2", writerEpoch: 5n }, anchorId: "w-0", chainIds, ownEpoch: 5n })).toEqual({ t: "stored", upTo: 1 });
  });
  it("the record our chain follows at the head: nothing stored, re-send all", () => {
    expect(judgeStreamHead({ head: { id: "w-0", writerEpoch: 5n }, anchorId: "w-0", chainIds, ownEpoch: 5n })).toEqual({ t: "none-stored" });
    expect(judgeStreamHead({ head: undefined, anchorId: undefined, chainIds, ownEpoch: 5n })).toEqual({ t: "none-stored" });
  });
  it("a newer epoch's record at the head: superseded, never re-chained on top of it", () => {
    expect(judgeStreamHead({ head: { id: "x-1", writerEpoch: 9n }, anchorId: "w-0", chainIds, ownEpoch: 5n })).toEqual({ t: "superseded", newerEpoch: 9n });
  });
  it("its own epoch's record at the head, no longer in its chain (given up at its deadline, stored after all): re-chain behind it", () => {
    // Under load a heavily retried pipelined burst met this: the writer fenced itself (ABORTED) and journaled nothing more.
    expect(judgeStreamHead({ head: { id: "w-00", writerEpoch: 5n }, anchorId: "w-0", chainIds, ownEpoch: 5n })).toEqual({ t: "behind-own" });
    // An unfenced writer (epoch 0) and an unstamped record: the same.
    expect(judgeStreamHead({ head: { id: "w-00", writerEpoch: undefined }, anchorId: "w-0", chainIds, ownEpoch: 0n })).toEqual({ t: "behind-own" });
  });
  it("anyone else's record at the head (older or no epoch; stream emptied): foreign, terminal too", () => {
    expect(judgeStreamHead({ head: { id: "x-1", writerEpoch: 3n }, anchorId: "w-0", chainIds, ownEpoch: 5n })).toEqual({ t: "foreign", writerEpoch: 3n });
    expect(judgeStreamHead({ head: { id: "x-1", writerEpoch: undefined }, anchorId: "w-0", chainIds, ownEpoch: 5n })).toEqual({ t: "foreign", writerEpoch: undefined });
    expect(judgeStreamHead({ head: undefined, anchorId: "w-0", chainIds, ownEpoch: 5n })).toEqual({ t: "foreign", writerEpoch: undefined });
  });
});
