import type { DashboardNodeState, DashboardSnapshot } from "./dashboard-view.js";
import { nodeCards, type NodeCard } from "./view-model.js";

/**
 * What the node panel shows of a snapshot: the nodes matching the filter box
 * and the chosen state, a page of them at a time, each card with at most a
 * few instance rows. So the page's size stays bounded however many nodes
 * the cluster has (a thousand cards with their tables made the page
 * unusable). Pure: the client renders what this returns.
 */

/** Node cards on one page of the panel. */
export const nodesPerPage = 25;
/** Instance rows a card shows; the rest are counted ("n more"). */
export const rowsPerCard = 12;
/** Longest filter text honoured (the input is cut there). */
export const maxFilterChars = 128;

export type StateChoice = DashboardNodeState | "all";

export interface NodeWindowQuery {
  /** Matches a node id, or a model on the node, as a case-insensitive substring; "" = every node. */
  readonly filter: string;
  readonly state: StateChoice;
  /** 0-based; clamped to the pages there are. */
  readonly page: number;
}

export interface WindowCard extends NodeCard {
  /** Rows not shown on the card. */
  readonly hiddenRows: number;
}

export interface NodeWindow {
  readonly cards: readonly WindowCard[];
  /** Nodes per state over the whole snapshot (the group buttons). */
  readonly counts: Readonly<Record<StateChoice, number>>;
  /** Nodes matching the filter and state. */
  readonly matching: number;
  /** The page shown (clamped) and how many there are (at least 1). */
  readonly page: number;
  readonly pages: number;
  /** 1-based index of the first card shown, for "21–40 of 1 000" (0 when none). */
  readonly first: number;
}

export function nodeWindow(s: DashboardSnapshot, q: NodeWindowQuery, nowMs: number): NodeWindow {
  const needle = q.filter.slice(0, maxFilterChars).trim().toLowerCase();
  const counts: Record<StateChoice, number> = { all: 0, ready: 0, unreachable: 0, lost: 0, "not reported since restart": 0, unknown: 0 };
  for (const n of s.nodes) {
    counts.all++;
    counts[n.state]++;
  }
  // Nodes a model matching the filter runs on (one pass over the instances).
  const byModel = new Set<string>();
  if (needle !== "") for (const i of s.instances) if (i.model.toLowerCase().includes(needle)) byModel.add(i.nodeId);
  const matching = s.nodes
    .filter((n) => (q.state === "all" || n.state === q.state) && (needle === "" || n.nodeId.toLowerCase().includes(needle) || byModel.has(n.nodeId)))
    .sort((a, b) => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0));
  const pages = Math.max(1, Math.ceil(matching.length / nodesPerPage));
  const page = Math.min(Math.max(0, Math.floor(q.page)), pages - 1);
  const shown = matching.slice(page * nodesPerPage, (page + 1) * nodesPerPage);
  const ids = new Set(shown.map((n) => n.nodeId));
  const cards = nodeCards({ ...s, nodes: shown, instances: s.instances.filter((i) => ids.has(i.nodeId)) }, nowMs).map((c) => ({ ...c, rows: c.rows.slice(0, rowsPerCard), hiddenRows: Math.max(0, c.rows.length - rowsPerCard) }));
  return { cards, counts, matching: matching.length, page, pages, first: shown.length === 0 ? 0 : page * nodesPerPage + 1 };
}
