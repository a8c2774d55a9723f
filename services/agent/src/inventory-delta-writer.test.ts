import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { BackendState, InventoryEntrySchema, inventoryDigest, type InventoryEntry } from "@warden/proto";
import { InventoryDeltaWriter } from "./inventory-delta-writer.js";

const entry = (n: number, state = BackendState.READY, memoryBytes = 1n << 30n): InventoryEntry => create(InventoryEntrySchema, { incarnation: `01JZ00000000000000000000${String(n).padStart(2, "0")}`, model: "m", address: `127.0.0.1:${String(7000 + n)}`, state, memoryBytes });

describe("InventoryDeltaWriter (agent side)", () => {
  it("full first; once acknowledged, only changes against it with the digest of the whole; a steady node sends empty deltas", () => {
    const w = new InventoryDeltaWriter({ fullEveryMs: 60_000 });
    expect(w.build(1n, [entry(1), entry(2)], 0)).toMatchObject({ t: "full" });
    // Not acknowledged yet: still full.
    expect(w.build(2n, [entry(1), entry(2)], 1_000)).toMatchObject({ t: "full" });
    w.acknowledged(2n);
    const now = [entry(1), entry(2, BackendState.STOPPING), entry(3, BackendState.LOADING)];
    const d = w.build(3n, now, 2_000);
    if (d.t !== "delta") throw new Error("expected a delta");
    expect(d.delta.baseSequence).toBe(2n);
    expect(d.delta.upserts.map((e) => e.incarnation)).toEqual([entry(2).incarnation, entry(3).incarnation]);
    expect(d.delta.removed).toEqual([]);
    expect(d.delta.digest).toBe(inventoryDigest(now));
    w.acknowledged(3n);
    const steady = w.build(4n, [entry(1), entry(3, BackendState.LOADING)], 3_000);
    expect(steady).toMatchObject({ t: "delta", delta: { baseSequence: 3n, upserts: [], removed: [entry(2).incarnation] } });
  });

  it("an answer to another heartbeat than the last built acknowledges nothing; reset and the period bring a full inventory", () => {
    const w = new InventoryDeltaWriter({ fullEveryMs: 10_000 });
    w.build(1n, [entry(1)], 0);
    w.acknowledged(1n);
    w.build(2n, [entry(1), entry(2)], 1_000);
    // A late answer to heartbeat 1 after 2 was built: the base stays 1.
    w.acknowledged(1n);
    expect(w.build(3n, [entry(1), entry(2)], 2_000)).toMatchObject({ t: "delta", delta: { baseSequence: 1n } });
    w.reset();
    expect(w.build(4n, [entry(1), entry(2)], 3_000)).toMatchObject({ t: "full" });
    w.acknowledged(4n);
    expect(w.build(5n, [entry(1), entry(2)], 4_000)).toMatchObject({ t: "delta" });
    expect(w.build(6n, [entry(1), entry(2)], 13_000)).toMatchObject({ t: "full" });
  });

  it("a memory reading changes an entry only past 1/16 of the last one sent (or 16 MiB); the digest stays that of what was sent", () => {
    const w = new InventoryDeltaWriter();
    const gib = 1n << 30n;
    w.build(1n, [entry(1, BackendState.READY, gib)], 0);
    w.acknowledged(1n);
    const small = w.build(2n, [entry(1, BackendState.READY, gib + gib / 32n)], 1_000);
    expect(small).toMatchObject({ t: "delta", delta: { upserts: [], digest: inventoryDigest([entry(1, BackendState.READY, gib)]) } });
    w.acknowledged(2n);
    const big = w.build(3n, [entry(1, BackendState.READY, gib + gib / 8n)], 2_000);
    if (big.t !== "delta") throw new Error("expected a delta");
    expect(big.delta.upserts.map((e) => e.memoryBytes)).toEqual([gib + gib / 8n]);
  });
});
