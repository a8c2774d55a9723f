/**
 * Which nodes' verdicts an explanation lists. The decision weighs every node;
 * the answer names one page of them: at 10 000 nodes a verdict for each was a
 * 1.3 MB answer, and the whole call cost about four times what one listing a
 * page of 100 does (58–64 against 12.6–13.5 ms of CPU, `npm run bench -- explain`).
 */
export interface ExplainPage {
  /** At most this many verdicts (at least 1). */
  readonly size: number;
  /** Only nodes whose id sorts after this one (the previous page's last). */
  readonly afterNodeId?: string;
  /** Only nodes whose id starts with this. */
  readonly nodeIdPrefix?: string;
}

/** The page as a range of indexes into the nodes (in id order): `[from, to)`, and whether a matching node follows it. */
export interface PageRange {
  readonly from: number;
  readonly to: number;
  readonly more: boolean;
}

/** The first index whose id is > `id` (`strict`) or >= `id`. O(log n). */
function lowerBound(nodes: readonly { readonly nodeId: string }[], id: string, strict: boolean): number {
  let lo = 0;
  let hi = nodes.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const at = (nodes[mid] as { readonly nodeId: string }).nodeId;
    if (at < id || (strict && at === id)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * The page's range in `nodes`, which are in node id order (code units, as
 * NodeTable.list() gives them): the nodes with the prefix form one run of
 * that order, so the page is the run's part after `afterNodeId`, cut at
 * `size`. O(log n + size).
 */
export function pageRange(nodes: readonly { readonly nodeId: string }[], page: ExplainPage): PageRange {
  const prefix = page.nodeIdPrefix ?? "";
  const from = Math.max(lowerBound(nodes, prefix, false), page.afterNodeId === undefined ? 0 : lowerBound(nodes, page.afterNodeId, true));
  const matches = (i: number): boolean => i < nodes.length && (nodes[i] as { readonly nodeId: string }).nodeId.startsWith(prefix);
  let to = from;
  while (to - from < page.size && matches(to)) to++;
  return { from, to, more: matches(to) };
}
