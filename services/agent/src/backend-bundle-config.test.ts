import { describe, expect, it } from "vitest";
import { parseAgentConfig } from "./agent-config.js";

const digest = "ab".repeat(32);
const base = `nodeId: n1
stateDir: /tmp/s
modelsPath: /srv/models
ports: { min: 9000, max: 9010, quarantine: 0s }
catalog:
  whisper:
    bundle: { source: "oci://r.example:5000/localai/whisper:v1@sha256:${digest}" }
`;

describe("catalog bundle entries", () => {
  it("run the installed bundle's run.sh from its directory with profile localai", () => {
    const c = parseAgentConfig(base);
    expect(c.catalog.whisper).toMatchObject({
      command: `/srv/models/.warden-cache/backends/${digest}/run.sh`,
      cwd: `/srv/models/.warden-cache/backends/${digest}`,
      profile: "localai",
      args: [],
      bundle: { source: `oci://r.example:5000/localai/whisper:v1@sha256:${digest}`, sha256: digest, sizeBytes: undefined },
    });
  });

  it("refuse a command beside a bundle, a missing modelsPath, an unpinned image, naming the field", () => {
    expect(() => parseAgentConfig(`${base}    command: /bin/true\n`)).toThrow(/^\[invalid_argument\] catalog\.whisper\.bundle: a bundle brings its own run\.sh/);
    expect(() => parseAgentConfig(base.replace("modelsPath: /srv/models\n", ""))).toThrow(/^\[invalid_argument\] modelsPath: required by catalog\.whisper \(a bundle\)/);
    expect(() => parseAgentConfig(base.replace(`@sha256:${digest}`, ""))).toThrow(/^\[invalid_argument\] catalog\.whisper\.bundle\.source: an image must be pinned/);
    expect(() => parseAgentConfig(`${base}    args: ["--x"]\n`)).toThrow(/^\[invalid_argument\] catalog\.whisper\.args: profile localai/);
  });
});
