import { describe, expect, it } from "vitest";
import { parseCoordinatorConfig } from "./coordinator-config.js";
import { errorOf, model } from "../test-kit/coordinator-config.fixture.js";


describe("coordinator config maxima", () => {
  it("refuses every duration and count above its documented maximum, naming the YAML path", () => {
    const cases: [string, RegExp][] = [
      ["policy:\n  idleTimeout: 18446744073709551615\n", /^policy\.idleTimeout: duration must be at most 720h/],
      ["policy:\n  idleTimeout: 31d\n", /^policy\.idleTimeout: /],
      ["policy:\n  busyTimeout: 30d1ms\n", /^policy\.busyTimeout: /],
      ["policy:\n  tickInterval: 2h\n", /^policy\.tickInterval: duration must be at most 1h/],
      ["policy:\n  limitPerNode: 1025\n", /^policy\.limitPerNode: must be an integer in \[0, 1024\]/],
      ["policy:\n  enforcementRetries: 10001\n", /^policy\.enforcementRetries: /],
      ["policy:\n  enforcementRetryInterval: 2h\n", /^policy\.enforcementRetryInterval: /],
      ["policy:\n  loadFailureCooldown: 31d\n", /^policy\.loadFailureCooldown: /],
      ["policy:\n  loadFailureCooldownMax: 31d\n", /^policy\.loadFailureCooldownMax: /],
      ["stop:\n  timeout: 2147483648\n", /^stop\.timeout: duration must be at most 24h/],
      ["stop:\n  freeTimeout: 25h\n", /^stop\.freeTimeout: /],
      ["stop:\n  rpcTimeout: 25h\n", /^stop\.rpcTimeout: /],
      ["nodeGrace: 31d\n", /^nodeGrace: /],
      ["nodeLostAfter: 31d\n", /^nodeLostAfter: /],
      ["recoveryWindow: 31d\n", /^recoveryWindow: /],
      ["loadWait: 25h\n", /^loadWait: /],
      ["loadWait: soon\n", /^loadWait: /],
      ["orphanGrace: 31d\n", /^orphanGrace: /],
      [model("    loadTimeout: 2d\n"), /^models\[0\]\.loadTimeout: /],
      [model("    contextSize: 10000001\n"), /^models\[0\]\.contextSize: /],
      [model("    memoryEstimate: 2PiB\n"), /^models\[0\]\.memoryEstimate: /],
      [model("    memoryEstimate: 9999999999TiB\n"), /^models\[0\]\.memoryEstimate: must be at most 1PiB/],
      [model(`    groups: [${Array.from({ length: 65 }, (_, i) => `g${String(i)}`).join(", ")}]\n`), /^models\[0\]\.groups: at most 64/],
      [model('    groups: [""]\n'), /^models\[0\]\.groups\[0\]: /],
      ["policy:\n  idleTimeout: 0\n", /^policy\.idleTimeout: must be > 0/],
      [model("    loadTimeout: 0s\n"), /^models\[0\]\.loadTimeout: must be > 0/],
      ["outageProbeInterval: 2h\n", /^outageProbeInterval: duration must be at most 1h/],
      ["outageProbeInterval: 0s\n", /^outageProbeInterval: must be > 0/],
      ["outageProbeTimeout: 0s\n", /^outageProbeTimeout: must be > 0/],
    ];
    for (const [yaml, re] of cases) expect(errorOf(yaml), yaml).toMatch(re);
  });

  it("accepts the maxima themselves", () => {
    const c = parseCoordinatorConfig("policy:\n  idleTimeout: 30d\n  limitPerNode: 1024\n  tickInterval: 1h\nstop:\n  timeout: 24h\nnodeLostAfter: 30d\n");
    expect(c.policy).toMatchObject({ idleTimeoutMs: 30 * 86_400_000, limitPerNode: 1024, tickIntervalMs: 3_600_000 });
    expect(c.stop.stopTimeoutMs).toBe(86_400_000);
    expect(c.nodeLostAfterMs).toBe(30 * 86_400_000);
    expect(parseCoordinatorConfig("loadWait: 24h\n").loadWaitMs).toBe(86_400_000);
  });

  it("the outage probe's interval and deadline default to 1 s", () => {
    expect(parseCoordinatorConfig("{}\n")).toMatchObject({ outageProbeIntervalMs: 1_000, outageProbeTimeoutMs: 1_000 });
    expect(parseCoordinatorConfig("outageProbeInterval: 250ms\noutageProbeTimeout: 1h\n")).toMatchObject({ outageProbeIntervalMs: 250, outageProbeTimeoutMs: 3_600_000 });
  });

  it("loadWait defaults to 30 s; 0 answers a load no node can take now at once", () => {
    expect(parseCoordinatorConfig("{}\n").loadWaitMs).toBe(30_000);
    expect(parseCoordinatorConfig("loadWait: 0s\n").loadWaitMs).toBe(0);
  });
});
