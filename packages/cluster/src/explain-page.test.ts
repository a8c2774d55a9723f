import { describe, expect, it } from "vitest";
import { seededRng } from "@warden/common";
import { pageRange, type ExplainPage } from "./explain-page.js";

/** The page the slow way: every node filtered, then cut. */
function reference(ids: readonly string[], page: ExplainPage): { ids: string[]; more: boolean } {
  const prefix = page.nodeIdPrefix ?? "";
  const after = page.afterNodeId;
  const matching = ids.filter((id) => id.startsWith(prefix) && (after === undefined || id > after));
  return { ids: matching.slice(0, page.size), more: matching.length > page.size };
}

describe("pageRange", () => {
  it("on random sorted ids, prefixes and resume points, is the filtered list cut at the size (binary search, no scan)", () => {
    const rng = seededRng(46);
    const pick = (n: number): number => Math.floor(rng.next() * n);
    const alphabet = ["a", "b", "ab", "b-", "0", "z"];
    for (let round = 0; round < 500; round++) {
      const set = new Set<string>();
      for (let i = pick(40); i > 0; i--) set.add(Array.from({ length: 1 + pick(4) }, () => alphabet[pick(alphabet.length)] ?? "a").join(""));
      const ids = [...set].sort();
      const nodes = ids.map((nodeId) => ({ nodeId }));
      const page: ExplainPage = {
        size: 1 + pick(8),
        ...(pick(3) === 0 ? {} : { nodeIdPrefix: alphabet[pick(alphabet.length)] ?? "" }),
        // A resume point that is a node id, or one between them (the node it named has gone).
        ...(pick(2) === 0 ? {} : { afterNodeId: pick(2) === 0 && ids.length > 0 ? (ids[pick(ids.length)] ?? "") : `${alphabet[pick(alphabet.length)] ?? ""}~` }),
      };
      const r = pageRange(nodes, page);
      const want = reference(ids, page);
      expect(ids.slice(r.from, r.to), JSON.stringify({ ids, page })).toEqual(want.ids);
      expect(r.more, JSON.stringify({ ids, page })).toBe(want.more);
    }
  });

  it("an empty table, and a resume point past the last node: an empty page with nothing more", () => {
    expect(pageRange([], { size: 5 })).toEqual({ from: 0, to: 0, more: false });
    expect(pageRange([{ nodeId: "a" }, { nodeId: "b" }], { size: 5, afterNodeId: "b" })).toEqual({ from: 2, to: 2, more: false });
  });
});
