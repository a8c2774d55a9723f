import { describe, expect, it } from "vitest";
import { parseCoordinatorConfig } from "./coordinator-config.js";
import { errorOf, model } from "../test-kit/coordinator-config.fixture.js";

const hex = "ab".repeat(32);
const artifact = (fields: string): string => model(`    modelFile: w.gguf\n    artifacts:\n      - ${fields}\n`);

describe("model artifacts in the coordinator config", () => {
  it("parses a model's artifacts and the artifact store", () => {
    const c = parseCoordinatorConfig(`artifactStore: /srv/artifacts\n${artifact(`{ source: "store:llama/w.gguf", sha256: "${hex}", sizeBytes: 4096, path: w.gguf }`)}`);
    expect(c.artifactStore).toBe("/srv/artifacts");
    expect(c.models[0]?.artifacts).toEqual([{ source: "store:llama/w.gguf", sha256: hex, sizeBytes: 4096, path: "w.gguf" }]);
    expect(parseCoordinatorConfig(model("")).models[0]?.artifacts).toEqual([]);
  });

  it("refuses a bad artifact whole, naming the field under the model", () => {
    expect(errorOf(artifact(`{ source: "https://x/w", sha256: "${hex.toUpperCase()}", sizeBytes: 1, path: w.gguf }`))).toMatch(/^models\[0\]\.artifacts\[0\]\.sha256: must be 64 lowercase hex/);
    expect(errorOf(artifact(`{ source: "file:///etc/passwd", sha256: "${hex}", sizeBytes: 1, path: w.gguf }`))).toMatch(/^models\[0\]\.artifacts\[0\]\.source: /);
    expect(errorOf(artifact(`{ source: "https://x/w", sha256: "${hex}", sizeBytes: 1099511627777, path: w.gguf }`))).toMatch(/^models\[0\]\.artifacts\[0\]\.sizeBytes: .*1 TiB/);
    expect(errorOf(artifact(`{ source: "https://x/w", sha256: "${hex}", sizeBytes: 1, path: ../w.gguf }`))).toMatch(/^models\[0\]\.artifacts\[0\]\.path: /);
    expect(errorOf(artifact(`{ source: "https://x/w", sha256: "${hex}", sizeBytes: 1 }`))).toMatch(/^models\[0\]\.artifacts\[0\]\.path: required/);
  });
});
