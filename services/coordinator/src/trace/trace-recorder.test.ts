import { mkdtemp, readFile, readdir, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { ManualClock, nullLogger } from "@warden/common";
import { parseTraceLine } from "@warden/whatif";
import { TraceRecorder, listSegments } from "./trace-recorder.js";
import { errorOf } from "../test-kit/coordinator-config.fixture.js";

let dir: string | undefined;
afterEach(async () => {
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

const call = (i: number) => ({ t: "call" as const, at: 1_700_000_000_000 + i, m: `model-${String(i % 7)}`, waitMs: i % 13, durMs: 100 + (i % 50), ok: true });

describe("workload trace recorder", () => {
  it("keeps every segment file together at or under maxBytes, rotating and dropping the oldest, each segment starting with the header", async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-trace-"));
    const maxBytes = 64 * 1024;
    const r = await TraceRecorder.open({ dir, maxBytes, segments: 4, clock: new ManualClock(), log: nullLogger });
    // About 20x the cap, flushed in batches.
    for (let batch = 0; batch < 100; batch++) {
      for (let i = 0; i < 150; i++) r.record(call(batch * 150 + i));
      await r.flush();
      const segs = await listSegments(dir);
      let total = 0;
      for (const s of segs) total += (await stat(s.path)).size;
      expect(total).toBeLessThanOrEqual(maxBytes);
      expect(segs.length).toBeLessThanOrEqual(4);
    }
    await r.close();
    const segs = await listSegments(dir);
    expect(segs.length).toBe(4);
    // The oldest were dropped: numbering went on well past 4.
    expect(segs[0]?.n).toBeGreaterThan(10);
    for (const s of segs) {
      const lines = (await readFile(s.path, "utf8")).trimEnd().split("\n");
      expect(JSON.parse(lines[0] ?? "")).toMatchObject({ v: 1, kind: "warden-trace", source: "coordinator" });
      lines.forEach((l, i) => {
        expect(parseTraceLine(l, i + 1)).toBeDefined();
      });
    }
    // The newest segment ends with the last line recorded.
    const last = (await readFile(segs[3]?.path ?? "", "utf8")).trimEnd().split("\n").pop();
    expect(JSON.parse(last ?? "")).toEqual(call(100 * 150 - 1));
    expect(r.droppedLines).toBe(0);
  });

  it("a full buffer drops and counts lines instead of waiting; the timer flushes what was kept", async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-trace-"));
    const clock = new ManualClock();
    const r = await TraceRecorder.open({ dir, maxBytes: 1024 * 1024, maxBufferedLines: 10, flushIntervalMs: 1_000, clock, log: nullLogger });
    for (let i = 0; i < 25; i++) r.record(call(i));
    expect(r.droppedLines).toBe(15);
    clock.advance(1_000);
    await r.close();
    expect(r.writtenLines).toBe(10);
    const files = await readdir(dir);
    expect(files).toHaveLength(1);
  });

  it("a restart starts a new segment after the ones already there and keeps them under the cap", async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-trace-"));
    for (let run = 0; run < 3; run++) {
      const r = await TraceRecorder.open({ dir, maxBytes: 1024 * 1024, clock: new ManualClock(), log: nullLogger });
      r.record(call(run));
      await r.close();
    }
    expect((await listSegments(dir)).map((s) => s.n)).toEqual([1, 2, 3]);
  });

  it("trace config: bounds and unknown fields are refused naming the field", () => {
    expect(errorOf("trace:\n  enabled: false\n")).toBe("accepted");
    expect(errorOf("trace:\n  maxBytes: 128MiB\n")).toBe("accepted");
    expect(errorOf("trace:\n  maxBytes: 10KiB\n")).toMatch(/^trace\.maxBytes: must be from 1MiB to 16GiB/);
    expect(errorOf("trace:\n  maxBytes: 32GiB\n")).toMatch(/^trace\.maxBytes/);
    expect(errorOf("trace:\n  enabled: yes please\n")).toMatch(/^trace\.enabled/);
    expect(errorOf("trace:\n  keep: 3\n")).toMatch(/^trace\.keep: unknown field/);
  });
});
