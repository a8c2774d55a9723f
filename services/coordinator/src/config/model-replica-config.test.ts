import { describe, expect, it } from "vitest";
import { defaultReplicas, replicaBounds } from "@warden/loader";
import { parseCoordinatorConfig } from "./coordinator-config.js";
import { errorOf, model } from "../test-kit/coordinator-config.fixture.js";


describe("coordinator config: model replicas, spread, idleTimeout", () => {
  it("parses replicas, spread and idleTimeout into the ModelSpec; left out, the defaults", () => {
    const c = parseCoordinatorConfig(model("    replicas: { min: 1, max: 4, targetInFlight: 8, scaleDownAfter: 2m }\n    spread: node\n    idleTimeout: 0\n"));
    expect(c.models[0]).toMatchObject({ replicas: { min: 1, max: 4, targetInFlight: 8, scaleDownAfterMs: 120_000 }, spread: "node", idleTimeoutMs: 0 });
    const g = parseCoordinatorConfig(model("    spread: gpu\n    idleTimeout: 90s\n"));
    expect(g.models[0]).toMatchObject({ spread: "gpu", idleTimeoutMs: 90_000 });
    // Left out: today's behaviour (one instance on demand, the policy's idle timeout).
    expect(parseCoordinatorConfig(model("")).models[0]).toMatchObject({ replicas: defaultReplicas, spread: "any", idleTimeoutMs: undefined });
  });

  it("an unset max follows min; the maxima themselves are accepted", () => {
    expect(parseCoordinatorConfig(model("    replicas: { min: 3 }\n")).models[0]?.replicas).toMatchObject({ min: 3, max: 3 });
    const B = replicaBounds;
    const c = parseCoordinatorConfig(model(`    replicas: { min: ${String(B.maxReplicas)}, max: ${String(B.maxReplicas)}, targetInFlight: ${String(B.maxTargetInFlight)}, scaleDownAfter: 30d }\n    idleTimeout: 30d\n`));
    expect(c.models[0]).toMatchObject({ replicas: { min: 1024, max: 1024, targetInFlight: 65_536, scaleDownAfterMs: 30 * 86_400_000 }, idleTimeoutMs: 30 * 86_400_000 });
  });

  it("refuses each bad field, naming it", () => {
    const cases: [string, RegExp][] = [
      [model("    replicas: 3\n"), /^models\[0\]\.replicas: must be a map/],
      [model("    replicas: { mix: 1 }\n"), /^models\[0\]\.replicas\.mix: unknown field/],
      [model("    replicas: { min: -1 }\n"), /^models\[0\]\.replicas\.min: must be an integer in \[0, 1024\]/],
      [model("    replicas: { min: 1.5 }\n"), /^models\[0\]\.replicas\.min: /],
      [model("    replicas: { min: 1025 }\n"), /^models\[0\]\.replicas\.min: /],
      [model("    replicas: { max: 0 }\n"), /^models\[0\]\.replicas\.max: must be an integer in \[1, 1024\]/],
      [model("    replicas: { max: 1025 }\n"), /^models\[0\]\.replicas\.max: /],
      [model('    replicas: { max: "2" }\n'), /^models\[0\]\.replicas\.max: /],
      [model("    replicas: { min: 3, max: 2 }\n"), /^models\[0\]\.replicas\.min: must be <= max \(2\), got 3/],
      [model("    replicas: { targetInFlight: 0 }\n"), /^models\[0\]\.replicas\.targetInFlight: /],
      [model("    replicas: { targetInFlight: 65537 }\n"), /^models\[0\]\.replicas\.targetInFlight: /],
      [model("    replicas: { scaleDownAfter: 0s }\n"), /^models\[0\]\.replicas\.scaleDownAfter: must be > 0/],
      [model("    replicas: { scaleDownAfter: 31d }\n"), /^models\[0\]\.replicas\.scaleDownAfter: /],
      [model("    replicas: { scaleDownAfter: soon }\n"), /^models\[0\]\.replicas\.scaleDownAfter: /],
      [model("    spread: rack\n"), /^models\[0\]\.spread: must be one of node, gpu, any/],
      [model("    spread: 1\n"), /^models\[0\]\.spread: /],
      [model("    idleTimeout: 31d\n"), /^models\[0\]\.idleTimeout: /],
      [model("    idleTimeout: [1]\n"), /^models\[0\]\.idleTimeout: must be a duration/],
      [model("    idleTimeout: -5\n"), /^models\[0\]\.idleTimeout: /],
    ];
    for (const [yaml, re] of cases) expect(errorOf(yaml), yaml).toMatch(re);
  });
});
