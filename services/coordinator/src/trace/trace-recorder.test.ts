import { mkdir, mkdtemp, readFile, readdir, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { Registry } from "prom-client";
import { ManualClock, nullLogger, type Logger } from "@warden/common";
import { isTraceHeader, parseTraceLine, type TraceLine } from "@warden/whatif";
import { TraceRecorder, listSegments } from "./trace-recorder.js";
import { registerTraceMetrics } from "./trace-metrics.js";
import { errorOf } from "../test-kit/coordinator-config.fixture.js";

let dir: string | undefined;
afterEach(async () => {
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

/** Every line of every segment, oldest first, headers left out (each parsed as a reader would). */
async function segmentLines(d: string): Promise<TraceLine[]> {
  const out: TraceLine[] = [];
  for (const s of await listSegments(d)) {
    (await readFile(s.path, "utf8"))
      .trimEnd()
      .split("\n")
      .forEach((text, i) => {
        const l = parseTraceLine(text, i + 1);
        if (l !== undefined && !isTraceHeader(l)) out.push(l);
      });
  }
  return out;
}

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

  it("a full buffer drops and counts lines instead of waiting; the timer flushes what was kept, then a gap line", async () => {
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
    const lines = await segmentLines(dir);
    expect(lines.slice(0, 10)).toEqual(Array.from({ length: 10 }, (_, i) => call(i)));
    expect(lines[10]).toEqual({ t: "gap", at: 1_700_000_000_000, lastAt: 1_700_000_000_000, dropped: 15 });
    expect(lines).toHaveLength(11);
  });

  it("dropped lines: a gap line with each next flush, the metric by reason, and a warning at most once a minute counting those not warned of", async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-trace-"));
    const clock = new ManualClock();
    const warnings: Record<string, unknown>[] = [];
    const log = { ...nullLogger, warn: (_msg: string, meta: Record<string, unknown> = {}) => warnings.push(meta), child: () => log } as Logger;
    const r = await TraceRecorder.open({ dir, maxBytes: 1024 * 1024, maxBufferedLines: 2, flushIntervalMs: 1_000, clock, log });
    const registry = new Registry();
    registerTraceMetrics(registry, r);
    const burst = async (first: number, n: number): Promise<void> => {
      for (let i = 0; i < n; i++) {
        r.record(call(first + i));
        clock.advance(10);
      }
      await r.flush();
    };
    // First burst: 3 dropped, over 20 ms (the gap spans them), one warning.
    await burst(0, 5);
    expect(warnings).toEqual([expect.objectContaining({ dropped: 3, droppedTotal: 3 })]);
    // Second burst 10 s later: its gap line is written, its warning held back (less than a minute).
    clock.advance(10_000);
    await burst(100, 6);
    expect(warnings).toHaveLength(1);
    // A minute after the first warning: one warning for the 4 held back and this burst's 1.
    clock.advance(60_000);
    await burst(200, 3);
    expect(warnings).toHaveLength(2);
    expect(warnings[1]).toMatchObject({ dropped: 5, droppedTotal: 8 });
    // A flush with nothing dropped writes no gap line and no warning.
    await burst(300, 1);
    await r.close();
    const gaps = (await segmentLines(dir)).filter((l) => l.t === "gap");
    const w0 = 1_700_000_000_000;
    expect(gaps).toEqual([
      { t: "gap", at: w0 + 20, lastAt: w0 + 40, dropped: 3 },
      { t: "gap", at: w0 + 10_050 + 20, lastAt: w0 + 10_050 + 50, dropped: 4 },
      { t: "gap", at: w0 + 70_110 + 20, lastAt: w0 + 70_110 + 20, dropped: 1 },
    ]);
    expect(warnings).toHaveLength(2);
    expect(r.droppedByReason()).toEqual({ "buffer-full": 8, "write-failed": 0 });
    const text = await registry.getSingleMetricAsString("warden_trace_dropped_lines_total");
    expect(text).toContain('warden_trace_dropped_lines_total{reason="buffer-full"} 8');
    expect(text).toContain('warden_trace_dropped_lines_total{reason="write-failed"} 0');
  });

  it("a failed write drops its batch; the next flush that succeeds writes the gap", async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-trace-"));
    const clock = new ManualClock();
    const r = await TraceRecorder.open({ dir, maxBytes: 1024 * 1024, clock, log: nullLogger });
    // No segment is open yet: with the directory gone, opening the first one fails.
    await rm(dir, { recursive: true, force: true });
    r.record(call(1));
    r.record(call(2));
    await r.flush();
    expect(r.droppedByReason()).toEqual({ "buffer-full": 0, "write-failed": 2 });
    await mkdir(dir);
    // The timer's flush has nothing buffered but the gap to write.
    clock.advance(1_000);
    await r.flush();
    r.record(call(3));
    await r.close();
    const lines = await segmentLines(dir);
    expect(lines).toEqual([{ t: "gap", at: 1_700_000_000_000, lastAt: 1_700_000_000_000, dropped: 2 }, call(3)]);
    expect(r.writtenLines).toBe(1);
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
