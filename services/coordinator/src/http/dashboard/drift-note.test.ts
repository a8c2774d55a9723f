import { describe, expect, it } from "vitest";
import { driftNote } from "./drift-note.js";
import type { MemoryBar } from "./view-model.js";

const GiB = 1024 ** 3;
const bar = (source: MemoryBar["source"], total: number, measured: number, accounted: number): MemoryBar => ({ source, totalBytes: total, measuredBytes: measured, accountedBytes: accounted, driftBytes: measured - accounted, measuredPct: 0, accountedPct: 0 });

describe("driftNote (the node card's drift tooltip and colour)", () => {
  it("a resting host measured by RAM is never an alarm, however large the gap, and says why", () => {
    const n = driftNote(bar("ram", 8 * GiB, 6 * GiB, 0));
    expect(n.high).toBe(false);
    expect(n.title).toContain("the host's used RAM");
    expect(n.title).toContain("drift 6.0 GiB = measured 6.0 GiB − accounted 0 B");
  });

  it("on GPUs a gap past a tenth of the total is an alarm; a small one is not", () => {
    expect(driftNote(bar("gpu", 24 * GiB, 10 * GiB, 4 * GiB)).high).toBe(true);
    expect(driftNote(bar("gpu", 24 * GiB, 5 * GiB, 4 * GiB)).high).toBe(false);
    expect(driftNote(bar("gpu", 24 * GiB, 1 * GiB, 6 * GiB)).title).toContain("negative");
  });
});
