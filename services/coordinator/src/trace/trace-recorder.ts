import { mkdir, open, readdir, rm, stat, type FileHandle } from "node:fs/promises";
import { privateStateDir } from "@warden/common";
import { join } from "node:path";
import type { Cancel, Clock, Logger } from "@warden/common";
import { traceHeader, type GapLine, type TraceLine } from "@warden/whatif";

/** The recorder's settings (coordinator config `trace:`). */
export interface TraceSettings {
  /** @default true */
  readonly enabled: boolean;
  /** All segment files together stay at or under this. @default 64 MiB */
  readonly maxBytes: number;
}

export const defaultTraceSettings: TraceSettings = { enabled: true, maxBytes: 64 * 1024 * 1024 };
/** Bounds of `trace.maxBytes`: 1 MiB to 16 GiB. */
export const minTraceBytes = 1024 * 1024;
export const maxTraceBytes = 16 * 1024 ** 3;

export interface TraceRecorderOptions {
  readonly dir: string;
  readonly maxBytes: number;
  readonly clock: Clock;
  readonly log: Logger;
  /** Segment files the cap is split into; the oldest goes when a new one starts past the cap. @default 8 */
  readonly segments?: number;
  /** Lines buffered between flushes; more are dropped and counted, never waited for. @default 20000 */
  readonly maxBufferedLines?: number;
  /** @default 1000 */
  readonly flushIntervalMs?: number;
  /** At most one warning about dropped lines this often (each says how many were dropped since the last). @default 60000 */
  readonly dropWarnIntervalMs?: number;
}

/** Why lines were dropped: the buffer was full, or the write of their batch failed. */
export type DropReason = "buffer-full" | "write-failed";

/** Lines dropped and not yet marked in the trace: written as one gap line with the next flush. */
interface PendingGap {
  at: number;
  lastAt: number;
  dropped: number;
}

const segmentPattern = /^trace-(\d{10})\.jsonl$/;

export function segmentName(n: number): string {
  return `trace-${String(n).padStart(10, "0")}.jsonl`;
}

/** The segment files in `dir`, oldest first. */
export async function listSegments(dir: string): Promise<{ readonly n: number; readonly path: string }[]> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw err;
  }
  const out: { n: number; path: string }[] = [];
  for (const name of names) {
    const m = segmentPattern.exec(name);
    if (m !== null) out.push({ n: Number(m[1]), path: join(dir, name) });
  }
  return out.sort((a, b) => a.n - b.n);
}

/**
 * The workload trace's writer: `record` appends one line to an in-memory
 * buffer and returns (never awaits, never throws, never blocks a call); a
 * timer flushes the buffer to the current segment file. A full buffer drops
 * the line and counts it. Each segment starts with the version header and is
 * at most maxBytes/segments; starting a new one removes the oldest past the
 * cap. A write error is logged once per flush and the batch dropped (counted).
 * Dropped lines are never silent: the next flush writes a gap line (so a
 * replay can say the trace has a gap there) and, at most once a minute, a
 * warning with how many were dropped since the last one.
 */
export class TraceRecorder {
  private buffer: string[] = [];
  private readonly drops: Record<DropReason, number> = { "buffer-full": 0, "write-failed": 0 };
  private gap: PendingGap | undefined;
  private warnedAt: number | undefined;
  private warnedDrops = 0;
  private written = 0;
  private timer: Cancel | undefined;
  private flushing: Promise<void> | undefined;
  private file: { handle: FileHandle; n: number; bytes: number } | undefined;
  private segments: { n: number; path: string; bytes: number }[] = [];
  private closed = false;
  private readonly segmentBytes: number;
  private readonly maxLines: number;
  private readonly flushMs: number;
  private readonly warnMs: number;

  private constructor(private readonly o: TraceRecorderOptions) {
    const count = Math.max(2, o.segments ?? 8);
    this.segmentBytes = Math.max(4096, Math.floor(o.maxBytes / count));
    this.maxLines = o.maxBufferedLines ?? 20_000;
    this.flushMs = o.flushIntervalMs ?? 1_000;
    this.warnMs = o.dropWarnIntervalMs ?? 60_000;
  }

  /** Opens the trace directory (owner-only, like the rest of the state dir) and keeps the segments already there. */
  static async open(o: TraceRecorderOptions): Promise<TraceRecorder> {
    await mkdir(o.dir, { recursive: true, mode: 0o700 });
    // Segments left readable by others (by hand, or an older version) are made owner-only, as the rest of the state dir.
    for (const t of await privateStateDir(o.dir)) o.log.warn("state readable by other users: tightened", { ...t });
    const r = new TraceRecorder(o);
    for (const s of await listSegments(o.dir)) r.segments.push({ ...s, bytes: (await stat(s.path)).size });
    r.arm();
    return r;
  }

  /** Lines dropped because the buffer was full or a write failed. */
  get droppedLines(): number {
    return this.drops["buffer-full"] + this.drops["write-failed"];
  }

  /** Lines dropped, by why (warden_trace_dropped_lines_total). */
  droppedByReason(): Readonly<Record<DropReason, number>> {
    return { ...this.drops };
  }

  get writtenLines(): number {
    return this.written;
  }

  /** Buffers one line. O(1); the JSON is built here, the write happens at the next flush. */
  record(line: TraceLine): void {
    if (this.closed) return;
    if (this.buffer.length >= this.maxLines) {
      this.drop(1, "buffer-full");
      return;
    }
    const text = JSON.stringify(line) + "\n";
    this.buffer.push(text);
  }

  /** Buffers one line given as its JSON text (a routed call's, trace-taps.ts callLineJson); as `record` otherwise. */
  recordJson(json: string): void {
    if (this.closed) return;
    if (this.buffer.length >= this.maxLines) {
      this.drop(1, "buffer-full");
      return;
    }
    this.buffer.push(json + "\n");
  }

  /** Counts dropped lines and widens the pending gap over them. */
  private drop(lines: number, why: DropReason): void {
    this.drops[why] += lines;
    const now = this.o.clock.wallNow();
    if (this.gap === undefined) this.gap = { at: now, lastAt: now, dropped: lines };
    else {
      this.gap.lastAt = now;
      this.gap.dropped += lines;
    }
  }

  /** Puts a gap whose line was not written back into the pending one. */
  private widen(g: PendingGap): void {
    const p = this.gap;
    this.gap = p === undefined ? { ...g } : { at: Math.min(p.at, g.at), lastAt: Math.max(p.lastAt, g.lastAt), dropped: p.dropped + g.dropped };
  }

  /** One warning for the lines dropped since the last, unless one was logged less than dropWarnIntervalMs ago (the next one counts these too). */
  private warnDropped(): void {
    const now = this.o.clock.now();
    const total = this.droppedLines;
    if (total === this.warnedDrops || (this.warnedAt !== undefined && now - this.warnedAt < this.warnMs)) return;
    this.o.log.warn("trace lines dropped: the trace has a gap (warden_trace_dropped_lines_total)", { dir: this.o.dir, dropped: total - this.warnedDrops, droppedTotal: total, ...this.drops });
    this.warnedAt = now;
    this.warnedDrops = total;
  }

  private arm(): void {
    this.timer = this.o.clock.setTimer(this.flushMs, () => {
      void this.flush().finally(() => {
        if (!this.closed) this.arm();
      });
    });
  }

  /** Writes what is buffered (one flush at a time; a second caller waits for the running one, then flushes its own lines). */
  async flush(): Promise<void> {
    while (this.flushing !== undefined) await this.flushing;
    const gap = this.gap;
    if (this.buffer.length === 0 && gap === undefined) return;
    const batch = this.buffer;
    this.buffer = [];
    this.gap = undefined;
    // After the lines kept before the drops, before any recorded after this flush began.
    if (gap !== undefined) {
      const line: GapLine = { t: "gap", ...gap };
      batch.push(JSON.stringify(line) + "\n");
    }
    this.flushing = this.write(batch, gap).finally(() => {
      this.flushing = undefined;
    });
    await this.flushing;
    if (gap !== undefined) this.warnDropped();
  }

  /** Writes `batch` (ending with `gap`'s line when there is one); on failure its lines are dropped and the gap goes to the next flush. */
  private async write(batch: string[], gap: PendingGap | undefined): Promise<void> {
    try {
      let i = 0;
      while (i < batch.length) {
        const f = await this.current();
        // As many lines as fit the segment (at least one, so a long line still goes somewhere).
        let bytes = 0;
        let j = i;
        while (j < batch.length && (j === i || f.bytes + bytes + (batch[j]?.length ?? 0) <= this.segmentBytes)) bytes += batch[j++]?.length ?? 0;
        await f.handle.write(batch.slice(i, j).join(""));
        f.bytes += bytes;
        const seg = this.segments[this.segments.length - 1];
        if (seg !== undefined) seg.bytes = f.bytes;
        this.written += j - i;
        i = j;
        if (i < batch.length) await this.rotate();
      }
      // The gap line is the trace's, not a recorded line.
      if (gap !== undefined) this.written--;
      const f = this.file;
      if (f !== undefined && f.bytes >= this.segmentBytes) await this.rotate();
    } catch (err) {
      const lines = batch.length - (gap === undefined ? 0 : 1);
      if (lines > 0) this.drop(lines, "write-failed");
      if (gap !== undefined) this.widen(gap);
      this.o.log.warn("trace write failed: lines dropped", { dir: this.o.dir, lines, error: err instanceof Error ? err.message : String(err) });
    }
  }

  /** The open segment, starting one (with its header) when none is open. */
  private async current(): Promise<{ handle: FileHandle; n: number; bytes: number }> {
    if (this.file !== undefined) return this.file;
    const n = (this.segments[this.segments.length - 1]?.n ?? 0) + 1;
    const path = join(this.o.dir, segmentName(n));
    const handle = await open(path, "a", 0o600);
    const header = JSON.stringify(traceHeader("coordinator", this.o.clock.wallNow())) + "\n";
    await handle.write(header);
    this.file = { handle, n, bytes: header.length };
    this.segments.push({ n, path, bytes: header.length });
    await this.dropOldest();
    return this.file;
  }

  private async rotate(): Promise<void> {
    const f = this.file;
    this.file = undefined;
    await f?.handle.close();
  }

  /** Removes the oldest segments while all of them together (the new one's whole size counted) pass the cap. */
  private async dropOldest(): Promise<void> {
    const total = (): number => this.segments.reduce((s, x, i) => s + (i === this.segments.length - 1 ? this.segmentBytes : x.bytes), 0);
    while (this.segments.length > 1 && total() > this.o.maxBytes) {
      const old = this.segments.shift();
      if (old !== undefined) await rm(old.path, { force: true });
    }
  }

  /** Flushes what is buffered and closes the segment. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.timer?.();
    await this.flush();
    this.closed = true;
    await this.rotate();
  }
}
