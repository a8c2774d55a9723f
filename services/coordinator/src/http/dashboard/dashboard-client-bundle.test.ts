import { gzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { dashboardClientBundle } from "./dashboard-client-bundle.js";

/** The dashboard's budget for its script, gzipped as a browser fetches it: the page must stay light to open (dashboard.md). */
const budgetBytes = 150 * 1024;

describe("dashboard client bundle", () => {
  it("the script the coordinator serves, bundled from client/ as the build does, stays under 150 KiB gzipped", async () => {
    const code = await dashboardClientBundle();
    // The real bundle, not an empty build: the entry's own code is in it.
    expect(code).toContain("/api/dashboard/stream");
    const gzipped = gzipSync(code).length;
    process.stdout.write(`dashboard client: ${String(code.length)} bytes, ${(gzipped / 1024).toFixed(1)} KiB gzipped (budget ${String(budgetBytes / 1024)} KiB)\n`);
    expect(gzipped).toBeLessThan(budgetBytes);
  });
});
