import { describe, expect, it } from "vitest";
import { ArtifactProgress } from "./artifact-progress.js";
import { LoadJobs } from "./load-jobs.js";

const ev = (sha256: string, doneBytes: number, totalBytes: number, verified = false) => ({ t: "pulling" as const, sha256, doneBytes, totalBytes, verified });

describe("artifact progress in the load job", () => {
  it("sums a start's artifacts: pulling while bytes are due, verifying once all arrived, starting when all are verified", () => {
    const p = new ArtifactProgress();
    expect(p.report(ev("a", 0, 100))).toEqual({ phase: "pulling", doneBytes: 0, totalBytes: 100 });
    expect(p.report(ev("b", 50, 50, true))).toEqual({ phase: "pulling", doneBytes: 50, totalBytes: 150 });
    expect(p.report(ev("a", 100, 100))).toEqual({ phase: "verifying", doneBytes: 150, totalBytes: 150 });
    expect(p.report(ev("a", 100, 100, true))).toEqual({ phase: "starting", doneBytes: 150, totalBytes: 150 });
  });

  it("the job carries bytes and the rate since the phase began; a failure in it is a failure in pulling", () => {
    const jobs = new LoadJobs();
    jobs.loading("m", "i1", "n1", "starting", { nowMs: 0, wallMs: 0 }, undefined);
    jobs.progress("m", "i1", "n1", "pulling", 1_000, 10_000, { nowMs: 100, wallMs: 100 }, undefined);
    jobs.progress("m", "i1", "n1", "pulling", 5_000, 10_000, { nowMs: 2_100, wallMs: 2_100 }, undefined);
    expect(jobs.of("m", 2_100)).toMatchObject({ t: "loading", phase: "pulling", bytesDone: 5_000, bytesTotal: 10_000, bytesPerSecond: 2_000, sinceMs: 100 });
    expect(jobs.failed("m", "i1", "n1", "artifact … HTTP 404", "FAILED_PRECONDITION", { nowMs: 2_200, wallMs: 2_200 }, undefined)).toBe("pulling");
  });
});
