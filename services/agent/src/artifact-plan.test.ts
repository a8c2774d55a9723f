import { describe, expect, it } from "vitest";
import { judgeHttpAnswer, parseContentRange, planPull, progressDue, progressSteps } from "./artifact-plan.js";

describe("planPull", () => {
  it("uses a final file of the right size (hashed before use), whatever the partial", () => {
    expect(planPull({ finalBytes: 10, partialBytes: undefined }, 10)).toEqual({ t: "verify-final" });
    expect(planPull({ finalBytes: 10, partialBytes: 3 }, 10)).toEqual({ t: "verify-final" });
  });
  it("fetches from 0 without a partial, and drops a final file of the wrong size", () => {
    expect(planPull({ finalBytes: undefined, partialBytes: undefined }, 10)).toEqual({ t: "fetch", offset: 0, dropFinal: false, truncatePartial: false });
    expect(planPull({ finalBytes: 7, partialBytes: undefined }, 10)).toEqual({ t: "fetch", offset: 0, dropFinal: true, truncatePartial: false });
  });
  it("resumes from the partial's size, empties a partial larger than the file, verifies a complete one", () => {
    expect(planPull({ finalBytes: undefined, partialBytes: 4 }, 10)).toEqual({ t: "fetch", offset: 4, dropFinal: false, truncatePartial: false });
    expect(planPull({ finalBytes: undefined, partialBytes: 11 }, 10)).toEqual({ t: "fetch", offset: 0, dropFinal: false, truncatePartial: true });
    expect(planPull({ finalBytes: undefined, partialBytes: 10 }, 10)).toEqual({ t: "verify-partial" });
  });
  it("an empty artifact is verified from an empty partial or fetched", () => {
    expect(planPull({ finalBytes: 0, partialBytes: undefined }, 0)).toEqual({ t: "verify-final" });
    expect(planPull({ finalBytes: undefined, partialBytes: undefined }, 0)).toEqual({ t: "fetch", offset: 0, dropFinal: false, truncatePartial: false });
  });
});

describe("parseContentRange", () => {
  it("reads bytes start-end/total and refuses anything else", () => {
    expect(parseContentRange("bytes 5-9/10")).toEqual({ start: 5, end: 9, total: 10 });
    for (const bad of [undefined, "", "bytes 5-9/*", "bytes */10", "bytes 9-5/10", "bytes 5-10/10", "items 5-9/10", "bytes 5-9/10 trailing"]) expect(parseContentRange(bad)).toBeUndefined();
  });
});

describe("judgeHttpAnswer", () => {
  const base = { offset: 4, sizeBytes: 10, contentLength: undefined, contentRange: undefined };
  it("appends a 206 that starts at the offset and ends at the last byte", () => {
    expect(judgeHttpAnswer({ ...base, status: 206, contentRange: "bytes 4-9/10", contentLength: 6 })).toEqual({ t: "body", from: 4 });
  });
  it("restarts from 0 when the server ignores Range (200)", () => {
    expect(judgeHttpAnswer({ ...base, status: 200, contentLength: 10 })).toEqual({ t: "body", from: 0 });
  });
  it("refuses a 206 for another offset or with a wrong Content-Length, and calls another total a mismatch", () => {
    expect(judgeHttpAnswer({ ...base, status: 206, contentRange: "bytes 0-9/10" }).t).toBe("unavailable");
    expect(judgeHttpAnswer({ ...base, status: 206, contentRange: "bytes 4-8/10" }).t).toBe("unavailable");
    expect(judgeHttpAnswer({ ...base, status: 206, contentRange: "bytes 4-9/10", contentLength: 5 }).t).toBe("unavailable");
    expect(judgeHttpAnswer({ ...base, status: 206 }).t).toBe("unavailable");
    expect(judgeHttpAnswer({ ...base, status: 206, contentRange: "bytes 4-11/12" }).t).toBe("mismatch");
    expect(judgeHttpAnswer({ ...base, status: 200, contentLength: 12 }).t).toBe("mismatch");
  });
  it("404 and 410 are not-found, 416 restarts, other statuses are unavailable", () => {
    expect(judgeHttpAnswer({ ...base, status: 404 })).toEqual({ t: "not-found" });
    expect(judgeHttpAnswer({ ...base, status: 410 })).toEqual({ t: "not-found" });
    expect(judgeHttpAnswer({ ...base, status: 416 })).toEqual({ t: "restart" });
    expect(judgeHttpAnswer({ ...base, offset: 0, status: 416 }).t).toBe("unavailable");
    expect(judgeHttpAnswer({ ...base, status: 503 })).toEqual({ t: "unavailable", why: "HTTP 503" });
    expect(judgeHttpAnswer({ ...base, status: 403 }).t).toBe("unavailable");
  });
});

describe("progressDue", () => {
  it("reports each 1/32 and the end, so a pull makes at most 34 reports", () => {
    const total = 1_000_000;
    let last = 0;
    let reports = 1;
    for (let done = 0; done <= total; done += 777) {
      if (progressDue(last, done, total)) {
        last = done;
        reports++;
      }
    }
    if (progressDue(last, total, total)) reports++;
    expect(reports).toBeLessThanOrEqual(progressSteps + 2);
    expect(reports).toBeGreaterThanOrEqual(progressSteps);
    expect(progressDue(total, total, total)).toBe(false);
  });
});
