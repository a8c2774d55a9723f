import { Code } from "@warden/common";
import { describe, expect, it } from "vitest";
import { createHarness } from "./test-fakes.js";

// Serving through an agent outage: an instance of an unreachable node is
// routed while the directory says its backend answers the coordinator's probe
// (AgentDirectory.servesDuringOutage), and refused UNAVAILABLE once it does not.
describe("routing to an instance of an unreachable node", () => {
  it("goes on while its probe answers, as to any ready replica; refused UNAVAILABLE naming the node once the probe failed; no second copy started", async () => {
    const h = createHarness();
    const spec = h.loader.modelSpec("m1");
    if (spec === undefined) throw new Error("m1 is configured");
    expect(h.loader.adoptRemoteOnly(spec, "n2", "n2:7000", "old-1")).toBe(true);
    h.directory.unreachable.add("n2");
    h.directory.servingThroughOutage.add("old-1");
    const lease = await h.loader.acquire("m1", h.never);
    expect([lease.incarnation, lease.nodeId]).toEqual(["old-1", "n2"]);
    lease.complete();

    h.directory.servingThroughOutage.delete("old-1");
    const err = await h.loader.acquire("m1", h.never).then(
      () => undefined,
      (e: unknown) => e as { code: number; message: string; details: Record<string, unknown> },
    );
    expect(err?.code).toBe(Code.Unavailable);
    expect(err?.details["nodeId"]).toBe("n2");
    expect(err?.message).toContain("does not answer the coordinator's health probe");
    // Accounted all along: never forgotten, never started elsewhere (max 1).
    expect(h.loader.core.instances().map((v) => v.incarnation)).toEqual(["old-1"]);
    expect(h.n1.starts).toHaveLength(0);
  });
});
