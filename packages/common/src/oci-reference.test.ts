import { describe, expect, it } from "vitest";
import { checkArtifacts } from "./artifact-spec.js";
import { parseOciReference } from "./oci-reference.js";

const hex = "c".repeat(64);

describe("OCI references", () => {
  it("parse host, port, nested repository, tag and digest; oci+http is plain HTTP", () => {
    expect(parseOciReference("s", `oci://r.example:5000/a/b-c/d_e:v1.2@sha256:${hex}`)).toEqual({ protocol: "https:", host: "r.example:5000", repository: "a/b-c/d_e", tag: "v1.2", digest: hex });
    expect(parseOciReference("s", "oci+http://127.0.0.1:5000/models/llm")).toEqual({ protocol: "http:", host: "127.0.0.1:5000", repository: "models/llm", tag: undefined, digest: undefined });
  });

  it("refuse what is not a reference, naming the field", () => {
    const cases: [string, string][] = [
      ["oci://host", "must be oci://host[:port]/repository"],
      ["oci://host/Upper/x", "invalid repository"],
      ["oci://host/x:bad tag", "invalid tag"],
      ["oci://host/x@sha256:abc", "the digest must be sha256:<64 lowercase hex>"],
      [`oci://host/x@sha512:${hex}`, "the digest must be"],
      ["oci://ho st/x", "invalid registry host"],
      [`oci://host/${"a".repeat(256)}`, "invalid repository"],
    ];
    for (const [src, why] of cases) expect(() => parseOciReference("artifacts[0].source", src), src).toThrow(`artifacts[0].source: ${why}`);
  });

  it("are accepted as artifact sources", () => {
    const a = { source: `oci://r.example/models/llm:v1@sha256:${hex}`, sha256: "d".repeat(64), sizeBytes: 10, path: "llm.gguf" };
    expect(checkArtifacts("artifacts", [a])).toEqual([a]);
    expect(() => checkArtifacts("artifacts", [{ ...a, source: "oci://r.example/Bad" }])).toThrow("artifacts[0].source: invalid repository");
  });
});
