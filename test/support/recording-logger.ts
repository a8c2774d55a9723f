/** A Logger that keeps every line (children share the list), for tests that check what was logged. */
import type { LogMeta, Logger } from "@warden/common";

export interface LogLine {
  readonly level: "debug" | "info" | "warn" | "error";
  readonly msg: string;
  readonly meta: LogMeta;
}

export interface RecordingLogger extends Logger {
  readonly lines: LogLine[];
  /** Lines at `level` whose message or meta (as JSON) matches `re`. */
  matching(level: LogLine["level"], re: RegExp): LogLine[];
}

export function recordingLogger(): RecordingLogger {
  const lines: LogLine[] = [];
  const make = (bindings: LogMeta): Logger => ({
    debug: (msg, meta) => lines.push({ level: "debug", msg, meta: { ...bindings, ...meta } }),
    info: (msg, meta) => lines.push({ level: "info", msg, meta: { ...bindings, ...meta } }),
    warn: (msg, meta) => lines.push({ level: "warn", msg, meta: { ...bindings, ...meta } }),
    error: (msg, meta) => lines.push({ level: "error", msg, meta: { ...bindings, ...meta } }),
    child: (more) => make({ ...bindings, ...more }),
  });
  const root = make({});
  return {
    ...root,
    lines,
    matching: (level, re) => lines.filter((l) => l.level === level && re.test(`${l.msg} ${JSON.stringify(l.meta, (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v))}`)),
  };
}
