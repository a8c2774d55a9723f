import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { EventSchema, EvictionReason } from "@warden/proto";
import { eventLine } from "./admin-actions.js";

describe("warden events: one line per event", () => {
  const started = (actor: string) =>
    create(EventSchema, { id: "01J0", nodeId: "gpu-1", model: "m", incarnation: "01ARZ3NDEKTSV4RRFFQ69G5FAV", actor, payload: { case: "evictionStarted", value: { reason: EvictionReason.ADMIN, force: true } } });

  it("names who asked, and still shows the payload", () => {
    const line = eventLine(started('token "ops" (operator)'));
    expect(line).toContain('by="token \\"ops\\" (operator)"');
    expect(line).toContain('"reason":"EVICTION_REASON_ADMIN"');
  });

  it("shows no actor for the coordinator's own decisions", () => {
    const line = eventLine(started(""));
    expect(line).not.toContain("by=");
    expect(line).toContain('"reason":"EVICTION_REASON_ADMIN"');
  });
});
