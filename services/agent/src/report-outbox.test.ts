import { describe, expect, it } from "vitest";
import type { LogMeta, Logger } from "@warden/common";
import { ReportOutbox } from "./report-outbox.js";

/** A logger that keeps its warn lines. */
function recording(): { log: Logger; warns: { msg: string; fields: LogMeta | undefined }[] } {
  const warns: { msg: string; fields: LogMeta | undefined }[] = [];
  const log: Logger = {
    debug: () => {},
    info: () => {},
    warn: (msg, fields) => {
      warns.push({ msg, fields });
    },
    error: () => {},
    child: () => log,
  };
  return { log, warns };
}

describe("ReportOutbox", () => {
  it("numbers records, hands out at most perHeartbeat oldest first, and forgets what a heartbeat acknowledged", () => {
    const { log } = recording();
    const o = new ReportOutbox<{ n: string }>({ perHeartbeat: 2, maxPending: 10, what: "things", log });
    for (const n of ["a", "b", "c"]) o.record({ n });
    expect(o.next()).toEqual([{ n: "a", id: 1 }, { n: "b", id: 2 }]);
    // Not acknowledged (a lost answer): the same again.
    expect(o.next().map((r) => r.id)).toEqual([1, 2]);
    o.acknowledged(2);
    expect(o.next()).toEqual([{ n: "c", id: 3 }]);
    o.acknowledged(3);
    expect(o.next()).toEqual([]);
    expect(o.dropped()).toBe(0);
  });

  it("keeps at most maxPending while none is acknowledged: the oldest go, counted and logged, never silently", () => {
    const { log, warns } = recording();
    const o = new ReportOutbox<{ n: number }>({ perHeartbeat: 8, maxPending: 3, what: "artifact pulls", log });
    for (let n = 1; n <= 5; n++) o.record({ n });
    expect(o.next().map((r) => r.n)).toEqual([3, 4, 5]);
    expect(o.dropped()).toBe(2);
    expect(warns.map((w) => [w.msg.startsWith("artifact pulls not reported to the coordinator"), w.fields?.["dropped"], w.fields?.["droppedTotal"]])).toEqual([
      [true, 1, 1],
      [true, 1, 2],
    ]);
  });
});
