import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { BackendState, InventoryEntrySchema, inventoryDigest, type InventoryEntry } from "@warden/proto";
import { applyInventoryDelta, fullReported } from "./inventory-delta.js";

const entry = (n: number, state = BackendState.READY, memoryBytes = 0n): InventoryEntry => create(InventoryEntrySchema, { incarnation: `01JZ00000000000000000000${String(n).padStart(2, "0")}`, model: "m", address: `127.0.0.1:${String(7000 + n)}`, state, memoryBytes });
const incs = (r: { entries: Map<string, unknown> }) => [...r.entries.keys()].sort();

describe("inventory deltas (coordinator side)", () => {
  it("a delta onto its base yields what a full inventory of the result yields, digest included", () => {
    const base = fullReported(5n, [entry(1), entry(2), entry(3)]);
    const after = [entry(1), entry(2, BackendState.STOPPING), entry(4, BackendState.LOADING)];
    const r = applyInventoryDelta(base, 6n, { baseSequence: 5n, upserts: [after[1] as InventoryEntry, after[2] as InventoryEntry], removed: [entry(3).incarnation], digest: inventoryDigest(after) }, 4096);
    if (r.t !== "applied") throw new Error(r.why);
    const full = fullReported(6n, after);
    expect(r.reported.sequence).toBe(6n);
    expect(r.reported.digest).toBe(full.digest);
    expect(incs(r.reported)).toEqual(incs(full));
    expect(r.reported.entries.get(entry(2).incarnation)?.entry.state).toBe(BackendState.STOPPING);
  });

  it("an empty delta with the base's digest keeps the inventory; order of entries does not change the digest", () => {
    const base = fullReported(1n, [entry(1), entry(2)]);
    expect(inventoryDigest([entry(2), entry(1)])).toBe(base.digest);
    const r = applyInventoryDelta(base, 2n, { baseSequence: 1n, upserts: [], removed: [], digest: base.digest }, 4096);
    expect(r.t).toBe("applied");
  });

  it("no base, another base, a removal the base lacks, a result over the cap or a digest that differs: a mismatch, the base untouched", () => {
    const fresh = () => fullReported(5n, [entry(1), entry(2)]);
    const digestOf = (es: InventoryEntry[]) => inventoryDigest(es);
    const cases = [
      { base: undefined, delta: { baseSequence: 5n, upserts: [], removed: [], digest: digestOf([]) }, why: "no inventory held" },
      { base: fresh(), delta: { baseSequence: 4n, upserts: [], removed: [], digest: digestOf([entry(1), entry(2)]) }, why: "not 4" },
      { base: fresh(), delta: { baseSequence: 5n, upserts: [], removed: [entry(9).incarnation], digest: digestOf([entry(1), entry(2)]) }, why: "does not list" },
      { base: fresh(), delta: { baseSequence: 5n, upserts: [entry(3)], removed: [], digest: digestOf([entry(1), entry(2), entry(3)]) }, why: "over 2", cap: 2 },
      // The agent believes entry 2 is still loading: its digest is of another inventory than the base plus these changes.
      { base: fresh(), delta: { baseSequence: 5n, upserts: [entry(3)], removed: [], digest: digestOf([entry(1), entry(2, BackendState.LOADING), entry(3)]) }, why: "digest differs" },
    ];
    for (const c of cases) {
      const before = c.base === undefined ? undefined : { digest: c.base.digest, incs: incs(c.base), seq: c.base.sequence };
      const r = applyInventoryDelta(c.base, 6n, c.delta, c.cap ?? 4096);
      expect(r.t).toBe("mismatch");
      if (r.t === "mismatch") expect(r.why).toContain(c.why);
      if (c.base !== undefined) expect({ digest: c.base.digest, incs: incs(c.base), seq: c.base.sequence }).toEqual(before);
    }
  });
});
