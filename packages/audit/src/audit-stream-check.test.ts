import { describe, expect, it } from "vitest";
import { DiscardPolicy, RetentionPolicy, StorageType, type StreamConfig } from "@nats-io/jetstream";
import { auditStreamDrift, describeAuditStreamDrift } from "./audit-stream-check.js";
import { resolveAuditStreamOptions } from "./audit-stream.js";

const s = 1_000_000_000;
/** A stream as `warden nats provision` makes it, as nats-server 2.9 reports it. */
const fit: Partial<StreamConfig> = {
  name: "WARDEN_EVENTS",
  subjects: ["warden.events.>"],
  storage: StorageType.File,
  retention: RetentionPolicy.Limits,
  discard: DiscardPolicy.Old,
  max_age: 7 * 86_400 * s,
  max_bytes: -1,
  max_msgs: -1,
  max_msgs_per_subject: -1,
  max_msg_size: -1,
  duplicate_window: 120 * s,
  num_replicas: 1,
  sealed: false,
  allow_rollup_hdrs: false,
};
const want = resolveAuditStreamOptions({});

describe("auditStreamDrift", () => {
  it("finds nothing in a stream as provisioned, nor in the operator's own retention choices above the floors", () => {
    expect(auditStreamDrift(fit, want)).toEqual([]);
    expect(auditStreamDrift({ ...fit, max_age: 90 * 86_400 * s, max_bytes: 10 << 30, num_replicas: 3, deny_delete: true, deny_purge: true }, want)).toEqual([]);
  });

  it("reports a message cap, rollups and limits below the floors as drift, keeping the stream usable", () => {
    const d = auditStreamDrift({ ...fit, max_msgs: 1, allow_rollup_hdrs: true, max_age: 60 * s, max_bytes: 4096, discard: DiscardPolicy.New, duplicate_window: 10 * s }, want);
    expect(d.map((x) => x.field)).toEqual(["max_msgs", "max_age", "max_bytes", "discard", "duplicate_window", "allow_rollup_hdrs"]);
    expect(d.every((x) => !x.dangerous)).toBe(true);
    expect(describeAuditStreamDrift(d.slice(0, 1))).toBe("max_msgs 1 (want -1)");
  });

  it("marks as dangerous what would not store or keep the events: other subjects, memory, interest retention, sealed", () => {
    const d = auditStreamDrift({ ...fit, subjects: ["other.>"], storage: StorageType.Memory, retention: RetentionPolicy.Interest, sealed: true }, want);
    expect(d.map((x) => [x.field, x.dangerous])).toEqual([
      ["subjects", true],
      ["storage", true],
      ["retention", true],
      ["sealed", true],
    ]);
  });

  it("wants as many replicas as configured (HA)", () => {
    expect(auditStreamDrift(fit, resolveAuditStreamOptions({ replicas: 3 })).map((x) => `${x.field} ${x.found} ${x.want}`)).toEqual(["num_replicas 1 >= 3"]);
  });
});
