import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { GetHaStatusResponseSchema } from "@warden/proto";
import { haStatusText } from "./render-ha.js";

describe("ha status: the table", () => {
  it("shows each member's HTTP URL (\"-\" without one) and the leader's", () => {
    const s = create(GetHaStatusResponseSchema, {
      enabled: true,
      self: { holder: "b", address: "10.0.0.6:7070", role: "standby", httpUrl: "https://10.0.0.6:8443" },
      leaderHolder: "a",
      leaderAddress: "10.0.0.5:7070",
      leaderHttpUrl: "https://10.0.0.5:8443",
      epoch: 4n,
      standbys: [
        { holder: "a", address: "10.0.0.5:7070", role: "leader", httpUrl: "https://10.0.0.5:8443", lastSeenMs: 300n },
        { holder: "c", address: "10.0.0.7:7070", role: "standby", lastSeenMs: 900n },
      ],
    });
    const lines = haStatusText(s).split("\n");
    expect(lines).toContain("http     https://10.0.0.5:8443");
    expect(lines.find((l) => l.includes("HOLDER"))).toMatch(/HOLDER\s+│\s+ADDRESS\s+│\s+HTTP\s+│\s+ROLE/);
    expect(lines.find((l) => l.includes("b (this)"))).toMatch(/10\.0\.0\.6:7070\s+│\s+https:\/\/10\.0\.0\.6:8443\s+│\s+standby/);
    expect(lines.find((l) => /\ba\s+│/.test(l))).toMatch(/https:\/\/10\.0\.0\.5:8443\s+│\s+leader/);
    expect(lines.find((l) => /\bc\s+│/.test(l))).toMatch(/10\.0\.0\.7:7070\s+│\s+-\s+│\s+standby/);
  });

  it("says when the leader has no HTTP listener known", () => {
    const s = create(GetHaStatusResponseSchema, { enabled: true, self: { holder: "a", address: "h:1", role: "leader" }, leaderHolder: "a", leaderAddress: "h:1" });
    expect(haStatusText(s)).toContain("http     (no HTTP listener known)");
  });
});
