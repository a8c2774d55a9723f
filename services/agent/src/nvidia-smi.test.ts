import { describe, expect, it } from "vitest";
import { createMemoryProbe } from "./memory-probe.js";
import { parseComputeAppsCsv, parseGpuCsv } from "./nvidia-smi.js";

const mib = 1024 * 1024;

describe("nvidia-smi parsing", () => {
  it("parses the GPU query, names with commas included, skipping malformed lines", () => {
    expect(parseGpuCsv("0, NVIDIA H100 80GB HBM3, 81559, 512\n1, Tesla T4, rev, a, 15360, 0\nbad line\n2, X, [N/A], 3\n")).toEqual([
      { index: 0, name: "NVIDIA H100 80GB HBM3", totalBytes: 81559 * mib, usedBytes: 512 * mib },
      { index: 1, name: "Tesla T4, rev, a", totalBytes: 15360 * mib, usedBytes: 0 },
    ]);
  });

  it("parses the compute-apps query and sums a pid over GPUs", () => {
    expect(parseComputeAppsCsv("100, 2048\n100, 1024\n200, 10\n\n-3, 5\nx, 1\n")).toEqual(
      new Map([
        [100, 3072 * mib],
        [200, 10 * mib],
      ]),
    );
  });

  it("falls back to /proc without a usable nvidia-smi", async () => {
    const probe = createMemoryProbe({ nvidiaSmiPath: "/nonexistent/nvidia-smi" });
    const m = await probe([process.pid]);
    expect(m.gpuAvailable).toBe(false);
    expect(m.gpus).toEqual([]);
    expect(m.ram.totalBytes).toBeGreaterThan(0);
    expect(m.perPidBytes.get(process.pid)).toBeGreaterThan(0);
  });
});
