import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { ArtifactCacheReportSchema } from "@warden/proto";
import { artifactCacheOf } from "./artifact-cache-report.js";

describe("artifactCacheOf", () => {
  it("replaces the numbers each beat and the digest set only when a report carries one", () => {
    const withSet = create(ArtifactCacheReportSchema, { freeBytes: 10n, evictableBytes: 2n, digests: { sha256: [new Uint8Array(32).fill(0xab)] } });
    const first = artifactCacheOf(withSet, undefined);
    expect(first).toEqual({ freeBytes: 10, evictableBytes: 2, digests: new Set(["ab".repeat(32)]) });
    const next = artifactCacheOf(create(ArtifactCacheReportSchema, { freeBytes: 4n, evictableBytes: 0n }), first);
    expect(next).toEqual({ freeBytes: 4, evictableBytes: 0, digests: first.digests });
    expect(artifactCacheOf(create(ArtifactCacheReportSchema, { freeBytes: 1n, digests: { sha256: [] } }), next).digests).toEqual(new Set());
  });

  it("replaces the bundle list only when a report carries one; a missing bundle's size only when known", () => {
    const states = [
      { backend: "llama", installed: true, pullBytes: 0n, sizeKnown: true },
      { backend: "vllm", installed: false, pullBytes: 1024n, sizeKnown: true },
      { backend: "oci", installed: false, pullBytes: 0n, sizeKnown: false },
    ];
    const first = artifactCacheOf(create(ArtifactCacheReportSchema, { freeBytes: 10n, bundles: { states } }), undefined);
    expect(first.bundles).toEqual(
      new Map([
        ["llama", { installed: true, pullBytes: undefined }],
        ["vllm", { installed: false, pullBytes: 1024 }],
        ["oci", { installed: false, pullBytes: undefined }],
      ]),
    );
    expect(artifactCacheOf(create(ArtifactCacheReportSchema, { freeBytes: 4n }), first).bundles).toBe(first.bundles);
    expect(artifactCacheOf(create(ArtifactCacheReportSchema, { freeBytes: 4n, bundles: { states: [] } }), first).bundles).toEqual(new Map());
    // An agent that never sends the list: no bundle is counted.
    expect(artifactCacheOf(create(ArtifactCacheReportSchema, { freeBytes: 4n }), undefined).bundles).toBeUndefined();
  });
});
