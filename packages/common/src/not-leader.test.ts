import { describe, expect, it } from "vitest";
import { Code, WardenError } from "./errors.js";
import { isNotLeader, leaderAddressOf, notLeaderError } from "./not-leader.js";

describe("not-leader refusals", () => {
  it("carry the leader's address as a hint, UNAVAILABLE", () => {
    const e = notLeaderError("10.0.0.5:7070");
    expect(e.code).toBe(Code.Unavailable);
    expect(e.message).toContain("the leader is at 10.0.0.5:7070");
    expect(leaderAddressOf(e)).toBe("10.0.0.5:7070");
    expect(isNotLeader(e)).toBe(true);
  });

  it("survive the details trailer's JSON round trip", () => {
    const e = notLeaderError("[::1]:7070");
    const wire = new WardenError(e.code, e.rawMessage, { details: JSON.parse(JSON.stringify(e.details)) as Record<string, unknown> });
    expect(leaderAddressOf(wire)).toBe("[::1]:7070");
  });

  it("without a known leader: no hint, still a not-leader refusal", () => {
    const e = notLeaderError(undefined);
    expect(leaderAddressOf(e)).toBeUndefined();
    expect(isNotLeader(e)).toBe(true);
    expect(e.message).toContain("no leader is known yet");
  });

  it("ignore other errors and implausible hints", () => {
    expect(leaderAddressOf(new WardenError(Code.Unavailable, "down"))).toBeUndefined();
    expect(leaderAddressOf(new Error("x"))).toBeUndefined();
    for (const bad of ["", "no-port", "http://a:1", "a b:1", "x".repeat(400) + ":1", 7]) {
      expect(leaderAddressOf(new WardenError(Code.Unavailable, "m", { details: { reason: "not-leader", leaderAddress: bad } }))).toBeUndefined();
    }
    expect(leaderAddressOf(new WardenError(Code.FailedPrecondition, "m", { details: { reason: "not-leader", leaderAddress: "a:1" } }))).toBeUndefined();
  });
});
