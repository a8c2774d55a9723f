/**
 * The decisions of an artifact pull, without I/O: what to do with what the
 * cache already holds, whether a source's answer to a resumed request can be
 * appended to the partial, and when to report progress. artifact-pull.ts
 * performs them.
 */

/** What the cache holds for one digest (sizes from stat; undefined = no such file). */
export interface CacheLook {
  readonly finalBytes: number | undefined;
  readonly partialBytes: number | undefined;
}

/**
 * - `verify-final`: a file sits at the digest's final path (an earlier pull, or
 *   a shared volume): hash it, use it when it matches.
 * - `fetch`: download from `offset` into the partial; `dropFinal` removes a
 *   final file of the wrong size first, `truncatePartial` empties a partial
 *   that cannot be a prefix (larger than the file).
 * - `verify-partial`: the partial is complete (killed between the last byte
 *   and the rename): hash it and rename, nothing to fetch.
 */
export type PullPlan =
  | { readonly t: "verify-final" }
  | { readonly t: "fetch"; readonly offset: number; readonly dropFinal: boolean; readonly truncatePartial: boolean }
  | { readonly t: "verify-partial" };

export function planPull(look: CacheLook, sizeBytes: number): PullPlan {
  if (look.finalBytes === sizeBytes) return { t: "verify-final" };
  const dropFinal = look.finalBytes !== undefined;
  const p = look.partialBytes;
  if (p === undefined) return { t: "fetch", offset: 0, dropFinal, truncatePartial: false };
  if (p > sizeBytes) return { t: "fetch", offset: 0, dropFinal, truncatePartial: true };
  if (p === sizeBytes && !dropFinal) return { t: "verify-partial" };
  return { t: "fetch", offset: p, dropFinal, truncatePartial: false };
}

/** A `Content-Range: bytes <start>-<end>/<total>` header; undefined when it is not one (`*` totals included). */
export function parseContentRange(header: string | undefined): { start: number; end: number; total: number } | undefined {
  if (header === undefined) return undefined;
  const m = /^bytes (\d{1,16})-(\d{1,16})\/(\d{1,16})$/.exec(header.trim());
  if (m === null) return undefined;
  const [start, end, total] = [Number(m[1]), Number(m[2]), Number(m[3])];
  if (end < start || end >= total) return undefined;
  return { start, end, total };
}

/** An HTTP answer to a request for bytes from `offset` (a Range header sent when offset > 0). */
export interface HttpAnswer {
  readonly offset: number;
  readonly sizeBytes: number;
  readonly status: number;
  readonly contentRange: string | undefined;
  readonly contentLength: number | undefined;
}

/**
 * - `body`: the body's bytes start at `from` (0 when the server ignored the
 *   Range and sent the whole file: the partial restarts from 0);
 * - `not-found`: 404 / 410;
 * - `mismatch`: the server describes another file (another size): the
 *   partial cannot be a prefix of it and is dropped;
 * - `restart`: 416 for our offset: the server's file is not what the partial
 *   was a prefix of; drop the partial and ask again from 0;
 * - `unavailable`: any other status (5xx, 401, 403…): the partial stays.
 */
export type HttpVerdict =
  | { readonly t: "body"; readonly from: number }
  | { readonly t: "not-found" }
  | { readonly t: "mismatch"; readonly why: string }
  | { readonly t: "restart" }
  | { readonly t: "unavailable"; readonly why: string };

export function judgeHttpAnswer(a: HttpAnswer): HttpVerdict {
  if (a.status === 404 || a.status === 410) return { t: "not-found" };
  if (a.status === 200) {
    if (a.contentLength !== undefined && a.contentLength !== a.sizeBytes) return { t: "mismatch", why: `the source sends ${String(a.contentLength)} bytes, the artifact has ${String(a.sizeBytes)}` };
    return { t: "body", from: 0 };
  }
  if (a.status === 206) {
    const r = parseContentRange(a.contentRange);
    if (r === undefined) return { t: "unavailable", why: `206 with an unusable Content-Range ${JSON.stringify((a.contentRange ?? "").slice(0, 64))}` };
    if (r.total !== a.sizeBytes) return { t: "mismatch", why: `the source's file has ${String(r.total)} bytes, the artifact ${String(a.sizeBytes)}` };
    if (r.start !== a.offset || r.end !== a.sizeBytes - 1) return { t: "unavailable", why: `asked for bytes ${String(a.offset)}-, got Content-Range ${String(r.start)}-${String(r.end)}` };
    if (a.contentLength !== undefined && a.contentLength !== r.end - r.start + 1) return { t: "unavailable", why: `Content-Length ${String(a.contentLength)} disagrees with Content-Range ${String(r.start)}-${String(r.end)}` };
    return { t: "body", from: a.offset };
  }
  if (a.status === 416 && a.offset > 0) return { t: "restart" };
  return { t: "unavailable", why: `HTTP ${String(a.status)}` };
}

/** Progress steps per artifact: a report each time another 1/32 arrived (plus start and end), so a start's event log stays bounded. */
export const progressSteps = 32;

/** Whether `doneBytes` deserves a report after one at `lastReportedBytes`. */
export function progressDue(lastReportedBytes: number, doneBytes: number, totalBytes: number): boolean {
  if (doneBytes >= totalBytes) return doneBytes !== lastReportedBytes;
  return doneBytes - lastReportedBytes >= Math.max(1, Math.ceil(totalBytes / progressSteps));
}
