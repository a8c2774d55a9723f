import { invalidArgument, maxIdentifierChars } from "@warden/common";

/**
 * Paging shared by ListNodes and ListModels: page sizes, the scan budget and
 * the page token. A token is the key of the last entry a page covered (keyset
 * paging), so a listing that changes between pages neither repeats nor skips
 * an entry present throughout; entries added or removed meanwhile may or may
 * not appear. The token also carries the filters it was issued for.
 */

/** Entries in a page when the request leaves page_size at 0 (old clients too). */
export const defaultPageSize = 500;
/** The largest page_size a request may ask for. */
export const maxPageSize = 1_000;
/**
 * Entries a page may look at before it answers (filters can skip many): a
 * page costs at most this much past finding its start, and may then hold
 * fewer than page_size entries, with a token to go on from.
 */
export const pageScanBudget = 10_000;
/** Longer tokens are refused before decoding (ours are far shorter). */
export const maxPageTokenChars = 1_024;

const prefixPattern = new RegExp(`^[A-Za-z0-9._:-]{0,${String(maxIdentifierChars)}}$`);

/** A `node_id_prefix` filter checked (ListNodes, ListModels, ExplainPlacement): what a node id may start with, or empty. */
export function checkNodeIdPrefix(prefix: string): void {
  if (!prefixPattern.test(prefix)) throw invalidArgument("node_id_prefix", `at most ${String(maxIdentifierChars)} characters of [A-Za-z0-9._:-]`);
}

/** `page_size` checked: 0 → the default; more than the maximum is refused. */
export function pageSizeOf(pageSize: number): number {
  if (pageSize === 0) return defaultPageSize;
  if (pageSize > maxPageSize) throw invalidArgument("page_size", `at most ${String(maxPageSize)}, got ${String(pageSize)}`);
  return pageSize;
}

/** Where a page starts: after node `n`'s whole entry (ListNodes, or ListModels past a node), or after one instance of it. */
export interface PageKey {
  readonly n: string;
  /** With `i`: after this instance (model, incarnation) of node `n`; absent: after all of `n`. */
  readonly m?: string;
  readonly i?: string;
}

interface TokenBody extends PageKey {
  /** Which listing and filters it was issued for. */
  readonly f: string;
}

export function encodePageToken(filters: string, key: PageKey): string {
  const body: TokenBody = { f: filters, ...key };
  return Buffer.from(JSON.stringify(body), "utf8").toString("base64url");
}

/** The key a token resumes after; undefined for an empty token (from the start). */
export function decodePageToken(token: string, filters: string): PageKey | undefined {
  if (token === "") return undefined;
  const bad = (why: string): Error => invalidArgument("page_token", why);
  if (token.length > maxPageTokenChars || !/^[A-Za-z0-9_-]+$/.test(token)) throw bad("is not a token this listing issued (pass the next_page_token of the previous page, unchanged)");
  let body: unknown;
  try {
    body = JSON.parse(Buffer.from(token, "base64url").toString("utf8"));
  } catch {
    throw bad("is not a token this listing issued (pass the next_page_token of the previous page, unchanged)");
  }
  const b = body as Partial<Record<keyof TokenBody, unknown>>;
  const str = (v: unknown): v is string => typeof v === "string";
  if (typeof body !== "object" || body === null || !str(b.f) || !str(b.n) || (b.m !== undefined && !str(b.m)) || (b.i !== undefined && !str(b.i)) || (b.m === undefined) !== (b.i === undefined)) {
    throw bad("is not a token this listing issued (pass the next_page_token of the previous page, unchanged)");
  }
  if (b.f !== filters) throw bad("was issued for another listing or other filters: send the same filters as for the first page, or start again without a token");
  return b.m === undefined ? { n: b.n } : { n: b.n, m: b.m, i: b.i as string };
}

/** Code-unit order, as NodeTable.list() sorts. */
export function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The first index in `sorted` whose id is > `after` (or >= `from`). O(log n). */
export function firstIndex(sorted: readonly { readonly nodeId: string }[] | readonly string[], bound: { readonly after: string } | { readonly from: string }): number {
  const idAt = (k: number): string => {
    const e = sorted[k];
    return typeof e === "string" ? e : (e?.nodeId ?? "");
  };
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const c = "after" in bound ? compareIds(idAt(mid), bound.after) <= 0 : compareIds(idAt(mid), bound.from) < 0;
    if (c) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Node ids in order from `start`: the registered nodes' sorted list merged
 * with a few extra sorted ids (nodes known only from elsewhere), each id once.
 */
export function* idsFrom(registered: readonly { readonly nodeId: string }[], extra: readonly string[], start: { readonly after: string } | { readonly from: string } | undefined): Generator<string> {
  let a = start === undefined ? 0 : firstIndex(registered, start);
  let b = start === undefined ? 0 : firstIndex(extra, start);
  while (a < registered.length || b < extra.length) {
    const x = registered[a]?.nodeId;
    const y = extra[b];
    if (y === undefined || (x !== undefined && compareIds(x, y) <= 0)) {
      if (x !== undefined && x === y) b++;
      a++;
      yield x as string;
    } else {
      b++;
      yield y;
    }
  }
}
