import { describe, expect, it } from "vitest";
import { perScrape } from "./per-scrape.js";

describe("perScrape", () => {
  it("computes once for every read in the same turn, afresh in a later one", async () => {
    let computed = 0;
    const value = perScrape(() => ++computed);
    // One scrape: every gauge reads in the same synchronous run.
    expect([value(), value(), value()]).toEqual([1, 1, 1]);
    await Promise.resolve();
    // The next scrape sees the fleet as it is then.
    expect(value()).toBe(2);
    expect(computed).toBe(2);
  });
});
