import { formatDurationMs } from "@warden/common";

/**
 * One redraw of a progress line: "<label> … <elapsed>[ (<reason>)]", the
 * elapsed time in whole seconds (at least 1 s: a line is only drawn once a
 * second has passed). Whole seconds because the one-second timer runs on the
 * event loop's cached clock and may fire a few ms before a second has passed
 * by the wall clock — the first line would otherwise say "… 998ms".
 */
export function progressLine(label: string, elapsedMs: number, reason: string): string {
  const seconds = Math.max(1, Math.round(elapsedMs / 1_000));
  return `${label} … ${formatDurationMs(seconds * 1_000)}${reason === "" ? "" : ` (${reason})`}`;
}
