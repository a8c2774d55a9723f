import { describe, expect, it } from "vitest";
import { checkArtifacts, maxArtifactBytes, maxArtifactsPerModel } from "./artifact-spec.js";

const hex = "a".repeat(64);
const ok = { source: "https://models.example/x.gguf", sha256: hex, sizeBytes: 10, path: "x.gguf" };

describe("checkArtifacts", () => {
  it("accepts URLs and store paths, absent as empty", () => {
    expect(checkArtifacts("artifacts", undefined)).toEqual([]);
    expect(checkArtifacts("artifacts", [ok, { ...ok, source: "store:llama/x.gguf", path: "dir/y.gguf", sizeBytes: 10n }])).toEqual([ok, { ...ok, source: "store:llama/x.gguf", path: "dir/y.gguf" }]);
  });
  it("refuses each bad field, naming it", () => {
    const cases: [unknown, string][] = [
      [{}, "artifacts: must be a list"],
      [[{ ...ok, sha256: "A".repeat(64) }], "artifacts[0].sha256"],
      [[{ ...ok, sha256: "ab" }], "artifacts[0].sha256"],
      [[ok, { ...ok, source: "ftp://x/y" }], "artifacts[1].source"],
      [[{ ...ok, source: "https://user:pw@x/y" }], "artifacts[0].source: must not carry credentials"],
      [[{ ...ok, source: `https://x/${"a".repeat(2048)}` }], "artifacts[0].source: must be at most 2048"],
      [[{ ...ok, source: "store:../etc/passwd" }], "artifacts[0].source"],
      [[{ ...ok, source: "store:/etc/passwd" }], "artifacts[0].source: must be relative"],
      [[{ ...ok, sizeBytes: maxArtifactBytes + 1 }], "artifacts[0].sizeBytes"],
      [[{ ...ok, sizeBytes: -1 }], "artifacts[0].sizeBytes"],
      [[{ ...ok, sizeBytes: 1.5 }], "artifacts[0].sizeBytes"],
      [[{ ...ok, path: "a/../b" }], "artifacts[0].path"],
      [[{ ...ok, path: "a\\b" }], "artifacts[0].path"],
      [[{ ...ok, path: "" }], "artifacts[0].path: required"],
      [[ok, ok], "artifacts[1].path: \"x.gguf\" is listed twice"],
      [[{ ...ok, extra: 1 }], "artifacts[0].extra: unknown field"],
      [Array.from({ length: maxArtifactsPerModel + 1 }, (_, i) => ({ ...ok, path: `f${String(i)}` })), "artifacts: at most 16"],
    ];
    for (const [input, msg] of cases) expect(() => checkArtifacts("artifacts", input), msg).toThrow(msg);
  });
});
