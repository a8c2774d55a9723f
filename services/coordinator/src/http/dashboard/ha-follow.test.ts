import { describe, expect, it } from "vitest";
import type { DashboardHa } from "./dashboard-view.js";
import { SeenMembers, haStep } from "./ha-follow.js";

const a = "http://127.0.0.1:8001";
const b = "http://127.0.0.1:8002";

function view(self: string, role: string, leader: string | undefined, members: Record<string, string> = { A: a, B: b }): DashboardHa {
  const ms = Object.entries(members).map(([holder, httpUrl]) => ({ holder, role: holder === leader ? "leader" : "standby", httpUrl }));
  const l = ms.find((m) => m.holder === leader);
  return { enabled: true, self: { holder: self, role, httpUrl: members[self] ?? "" }, ...(leader === undefined ? {} : { leader: l ?? { holder: leader, role: "leader", httpUrl: "" } }), epoch: "7", members: ms };
}

describe("the dashboard follows the HA leader", () => {
  it("serves on the leader, a paused leader and a single coordinator", () => {
    const seen = new SeenMembers();
    expect(haStep(view("A", "leader", "A"), seen, a, undefined)).toEqual({ t: "serve" });
    expect(haStep(view("A", "paused", undefined), seen, a, undefined)).toEqual({ t: "serve" });
    expect(haStep({ enabled: false, members: [] }, seen, a, undefined)).toEqual({ t: "serve" });
  });

  it("on a standby goes to the leader it has seen, and waits without one", () => {
    const seen = new SeenMembers();
    const v = view("B", "standby", "A");
    seen.add(v);
    expect(haStep(v, seen, b, undefined)).toEqual({ t: "go", url: a });
    expect(haStep(view("B", "standby", undefined), seen, b, undefined).t).toBe("wait");
  });

  it("never goes back to the member it left, nor to a URL no member list named", () => {
    const seen = new SeenMembers();
    seen.add(view("B", "standby", "A"));
    expect(haStep(view("B", "standby", "A"), seen, b, "A").t).toBe("wait");
    // A hostile member list names an unseen URL for the leader: not followed.
    const hostile: DashboardHa = { enabled: true, self: { holder: "B", role: "standby", httpUrl: b }, leader: { holder: "X", role: "leader", httpUrl: "http://evil.example:80" }, members: [] };
    expect(haStep(hostile, seen, b, undefined).t).toBe("wait");
  });

  it("falls back to another seen member, skipping this origin and the one left; ignores malformed URLs", () => {
    const seen = new SeenMembers();
    seen.add(view("A", "leader", "A", { A: a, B: b, C: "javascript:alert(1)" }));
    expect(seen.fallback(a, "A")).toBe(b);
    expect(seen.fallback(b, "A")).toBeUndefined();
    expect(seen.has("javascript:alert(1)")).toBe(false);
  });
});
