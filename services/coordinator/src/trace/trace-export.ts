import { createReadStream } from "node:fs";
import { createInterface } from "node:readline";
import { Code, WardenError } from "@warden/common";
import { listSegments } from "./trace-recorder.js";

/** Chunks ExportTrace streams: whole lines, at most this many bytes (a single longer line goes alone). */
export const maxExportChunkBytes = 256 * 1024;

/** The `at` of a line without parsing the rest (the recorder writes it as a plain number). */
function atOf(line: string): number | undefined {
  const m = /"at":(\d+)/.exec(line);
  return m === null ? undefined : Number(m[1]);
}

/**
 * The trace's segments, oldest first, as chunks of whole lines at or after
 * `sinceWallMs` (headers always kept: a reader needs one). A segment whose
 * successor began before `sinceWallMs` is skipped unread. Stops when
 * `signal` aborts (the caller went away).
 */
export async function* exportTrace(dir: string, sinceWallMs: number, signal: AbortSignal): AsyncGenerator<Uint8Array> {
  const segs = await listSegments(dir);
  if (segs.length === 0) throw new WardenError(Code.NotFound, "no workload trace recorded (trace.enabled is false, or nothing happened yet)");
  const enc = new TextEncoder();
  let chunk = "";
  for (const [i, s] of segs.entries()) {
    const next = segs[i + 1];
    if (next !== undefined && sinceWallMs > 0 && ((await firstAt(next.path)) ?? 0) < sinceWallMs) continue;
    const rl = createInterface({ input: createReadStream(s.path, { encoding: "utf8" }), crlfDelay: Infinity });
    try {
      for await (const line of rl) {
        if (signal.aborted) return;
        if (line === "") continue;
        const header = line.includes('"kind":"warden-trace"');
        if (!header && sinceWallMs > 0 && (atOf(line) ?? 0) < sinceWallMs) continue;
        if (chunk.length + line.length + 1 > maxExportChunkBytes && chunk !== "") {
          yield enc.encode(chunk);
          chunk = "";
        }
        chunk += line + "\n";
      }
    } catch (err) {
      // Dropped as the recorder rotated it away meanwhile: the next segment goes on.
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    } finally {
      rl.close();
    }
  }
  if (chunk !== "") yield enc.encode(chunk);
}

/** The header's time of a segment (its first line). */
async function firstAt(path: string): Promise<number | undefined> {
  const rl = createInterface({ input: createReadStream(path, { encoding: "utf8", end: 4095 }), crlfDelay: Infinity });
  try {
    for await (const line of rl) return atOf(line);
  } catch {
    return undefined;
  } finally {
    rl.close();
  }
  return undefined;
}
