import { describe, expect, it } from "vitest";
import { ArtifactProgress } from "./artifact-progress.js";
import type { FakeStart } from "./fake-agent.js";
import { createHarness } from "./test-fakes.js";

const pulling = (sha256: string, doneBytes: number, totalBytes: number, verified = false) => ({ t: "pulling" as const, sha256, doneBytes, totalBytes, verified });
const stage = (s: "resolving" | "pulling" | "unpacking" | "installed") => ({ t: "stage" as const, stage: s });

describe("a backend bundle's stages in the load job", () => {
  it("resolving, pulling its layers (bytes), unpacking, then starting once installed", () => {
    const p = new ArtifactProgress();
    expect(p.report(stage("resolving")).phase).toBe("resolving");
    expect(p.report(stage("pulling")).phase).toBe("starting");
    expect(p.report(pulling("layer", 0, 100))).toEqual({ phase: "pulling", doneBytes: 0, totalBytes: 100 });
    expect(p.report(pulling("layer", 100, 100, true))).toEqual({ phase: "starting", doneBytes: 100, totalBytes: 100 });
    expect(p.report(stage("unpacking")).phase).toBe("unpacking");
    expect(p.report(stage("installed")).phase).toBe("starting");
  });

  it("a model file still due outranks the bundle's stage, which shows again once the bytes are in", () => {
    const p = new ArtifactProgress();
    expect(p.report(pulling("model", 10, 100)).phase).toBe("pulling");
    expect(p.report(stage("resolving")).phase).toBe("pulling");
    expect(p.report(pulling("model", 100, 100, true)).phase).toBe("resolving");
    expect(p.report(stage("unpacking"))).toEqual({ phase: "unpacking", doneBytes: 100, totalBytes: 100 });
  });

  it("through the loader: the job's phases follow the agent's stream, and a failure while resolving is one in resolving", async () => {
    const h = createHarness();
    const phases: string[] = [];
    let start: FakeStart | undefined;
    h.n1.startScript = (s) => {
      start = s;
    };
    const load = h.track(h.loader.ensureLoaded("m1", h.never));
    const step = async (f: (s: FakeStart) => void): Promise<void> => {
      if (start === undefined) throw new Error("no start sent");
      f(start);
      await h.flush();
      phases.push(h.loader.loadJob("m1")?.phase ?? "none");
    };
    await h.flush();
    await step((s) => s.event(stage("resolving")));
    await step((s) => s.event(stage("pulling")).event(pulling("layer", 50, 100)));
    await step((s) => s.event(pulling("layer", 100, 100, true)));
    await step((s) => s.event(stage("unpacking")));
    await step((s) => s.event(stage("installed")));
    await step((s) => s.spawned());
    expect(phases).toEqual(["resolving", "pulling", "starting", "unpacking", "starting", "loading"]);
    start?.ready();
    await h.flush();
    expect(load.value().phase).toBe("ready");

    h.n1.startScript = (s) => {
      s.event(stage("resolving")).failed("backend bundle oci+http://r/x@sha256:…: cannot reach the registry r", { code: "ARTIFACT_SOURCE_UNAVAILABLE" });
    };
    const failing = h.track(h.loader.ensureLoaded("m2", h.never));
    await h.flush();
    expect(failing.done()).toBe(true);
    expect(h.loader.loadJob("m2")).toMatchObject({ t: "failed", phase: "resolving", nodeId: "n1" });
    expect(h.events.ofType("load.failed")).toMatchObject([{ model: "m2", phase: "resolving" }]);
  });
});
