import { describe, expect, it } from "vitest";
import type { DashboardInstance, DashboardNode, DashboardNodeState, DashboardSnapshot } from "./dashboard-view.js";
import { nodeWindow, nodesPerPage, rowsPerCard } from "./node-window.js";

function node(nodeId: string, state: DashboardNodeState = "ready"): DashboardNode {
  return { nodeId, address: "10.0.0.1:9000", state, draining: false, drainRemaining: 0, embedded: false, version: "0.2.0", labels: {}, gpus: [], ramTotalBytes: 0, ramUsedBytes: 0, accountedBytes: 0, foreign: [], lastHeartbeatAt: "", instanceCount: 0 };
}

function inst(nodeId: string, model: string, incarnation: string): DashboardInstance {
  return { model, nodeId, incarnation, address: "", state: "ready", inFlight: 0, lastUsedAt: "", busySince: "", sizeBytes: 0, pinned: false, groups: [], backend: "backend-sim", nodeState: "ready" };
}

/** 1 000 nodes, every tenth unreachable; node i runs m0 and, when i % 7 = 0, "whisper". */
function cluster(): DashboardSnapshot {
  const nodes = Array.from({ length: 1_000 }, (_, i) => node(`n-${String(i).padStart(4, "0")}`, i % 10 === 9 ? "unreachable" : "ready"));
  const instances = nodes.flatMap((n, i) => [inst(n.nodeId, "m0", `a${String(i)}`), ...(i % 7 === 0 ? [inst(n.nodeId, "whisper", `w${String(i)}`)] : [])]);
  // Reversed: the window sorts by node id itself.
  return { at: "", nodes: nodes.reverse(), instances, models: [] };
}

describe("the node panel's window", () => {
  it("shows one page of cards in node id order, with counts per state over all nodes", () => {
    const w = nodeWindow(cluster(), { filter: "", state: "all", page: 0 }, 0);
    expect(w.cards.map((c) => c.nodeId)).toEqual(Array.from({ length: nodesPerPage }, (_, i) => `n-${String(i).padStart(4, "0")}`));
    expect(w).toMatchObject({ matching: 1_000, pages: Math.ceil(1_000 / nodesPerPage), page: 0, first: 1, counts: { all: 1_000, ready: 900, unreachable: 100, lost: 0 } });
    const last = nodeWindow(cluster(), { filter: "", state: "all", page: 10_000 }, 0);
    expect(last.page).toBe(last.pages - 1);
    expect(last.cards.at(-1)?.nodeId).toBe("n-0999");
  });

  it("filters by node id or model (any case) and by state, together", () => {
    expect(nodeWindow(cluster(), { filter: "N-012", state: "all", page: 0 }, 0).cards.map((c) => c.nodeId)).toEqual(Array.from({ length: 10 }, (_, i) => `n-012${String(i)}`));
    const whisper = nodeWindow(cluster(), { filter: "whisp", state: "all", page: 0 }, 0);
    expect(whisper.matching).toBe(Math.ceil(1_000 / 7));
    expect(whisper.cards.every((c) => c.rows.some((r) => r.model === "whisper"))).toBe(true);
    const unreachable = nodeWindow(cluster(), { filter: "n-00", state: "unreachable", page: 0 }, 0);
    expect(unreachable.cards.map((c) => c.nodeId)).toEqual(Array.from({ length: 10 }, (_, i) => `n-00${String(i)}9`));
    expect(nodeWindow(cluster(), { filter: "nothing", state: "all", page: 3 }, 0)).toMatchObject({ cards: [], matching: 0, page: 0, pages: 1, first: 0 });
  });

  it("a card shows at most a few rows and counts the rest", () => {
    const s: DashboardSnapshot = { at: "", nodes: [node("big")], instances: Array.from({ length: 40 }, (_, i) => inst("big", `m${String(i).padStart(2, "0")}`, `i${String(i)}`)), models: [] };
    const [card] = nodeWindow(s, { filter: "", state: "all", page: 0 }, 0).cards;
    expect(card?.rows).toHaveLength(rowsPerCard);
    expect(card?.hiddenRows).toBe(40 - rowsPerCard);
    expect(card?.rows[0]?.model).toBe("m00");
  });
});
