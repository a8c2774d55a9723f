import { describe, expect, it } from "vitest";
import { Code, ManualClock, WardenError, nullLogger, seededRng } from "@warden/common";
import type { BundleSpec } from "./backend-bundle-config.js";
import { BundleReport, bundleStatesOf, type BundleBlob } from "./bundle-report.js";

const hex = (c: string): string => c.repeat(64);
const tarball: BundleSpec = { source: "https://example.test/llama.tar", sha256: hex("a"), sizeBytes: 1000 };
const image: BundleSpec = { source: `oci://registry.test/backends/vllm@sha256:${hex("b")}`, sha256: hex("b"), sizeBytes: undefined };
const layers: BundleBlob[] = [
  { sha256: hex("c"), sizeBytes: 300 },
  { sha256: hex("d"), sizeBytes: 700 },
];
const catalog = { llama: { bundle: tarball }, vllm: { bundle: image }, plain: {} };

function cacheOf(held: { final?: string[]; bundle?: string[] }): { has(sha256: string, kind: "final" | "bundle"): boolean } {
  return { has: (sha256, kind) => (held[kind] ?? []).includes(sha256) };
}

const flush = async (): Promise<void> => {
  for (let i = 0; i < 10; i++) await new Promise((r) => setImmediate(r));
};

describe("bundle states for the heartbeat", () => {
  it("a tarball pulls its size, an image its layers' (unknown before its manifest is read), less what the cache holds; installed pulls nothing", () => {
    expect(bundleStatesOf(catalog, cacheOf({}), (s) => (s === image ? undefined : [{ sha256: s.sha256, sizeBytes: s.sizeBytes ?? 0 }]))).toEqual([
      { backend: "llama", installed: false, pullBytes: 1000 },
      { backend: "vllm", installed: false, pullBytes: undefined },
    ]);
    const blobs = (s: BundleSpec): readonly BundleBlob[] => (s === image ? layers : [{ sha256: s.sha256, sizeBytes: 1000 }]);
    expect(bundleStatesOf(catalog, cacheOf({ final: [hex("a"), hex("d")] }), blobs)).toEqual([
      { backend: "llama", installed: false, pullBytes: 0 },
      { backend: "vllm", installed: false, pullBytes: 300 },
    ]);
    expect(bundleStatesOf(catalog, cacheOf({ bundle: [hex("a"), hex("b")] }), blobs)).toEqual([
      { backend: "llama", installed: true, pullBytes: 0 },
      { backend: "vllm", installed: true, pullBytes: 0 },
    ]);
  });

  it("reads an image's manifest in the background, retrying a failure with backoff; the version changes only when the states do", async () => {
    const clock = new ManualClock();
    let calls = 0;
    const report = new BundleReport({
      catalog,
      cache: cacheOf({}),
      clock,
      logger: nullLogger,
      rng: seededRng(1),
      backoff: { initialMs: 1_000, factor: 2, maxMs: 10_000, jitter: 0 },
      listLayers: async (spec) => {
        expect(spec).toBe(image);
        if (++calls === 1) throw new WardenError(Code.Unavailable, "registry down");
        return layers;
      },
    });
    const first = report.snapshot();
    expect(first.states.find((s) => s.backend === "vllm")?.pullBytes).toBeUndefined();
    expect(report.snapshot().version).toBe(first.version);
    const ctl = new AbortController();
    const done = report.resolve(ctl.signal);
    await flush();
    expect(calls).toBe(1);
    expect(report.snapshot().version).toBe(first.version);
    clock.advance(1_000);
    await done;
    expect(calls).toBe(2);
    const next = report.snapshot();
    expect(next.version).toBe(first.version + 1);
    expect(next.states.find((s) => s.backend === "vllm")?.pullBytes).toBe(1000);
  });

  it("stops retrying when the agent closes", async () => {
    const clock = new ManualClock();
    const report = new BundleReport({ catalog, cache: cacheOf({}), clock, logger: nullLogger, listLayers: () => Promise.reject(new Error("no route")) });
    const ctl = new AbortController();
    const done = report.resolve(ctl.signal);
    await flush();
    ctl.abort();
    await expect(done).resolves.toBeUndefined();
    expect(clock.pendingTimers()).toBe(0);
  });
});
