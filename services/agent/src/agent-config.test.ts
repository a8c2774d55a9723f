import { describe, expect, it } from "vitest";
import { Code, isWardenError } from "@warden/common";
import { parseAgentConfig, resolveAgentConfig } from "./agent-config.js";
import { backendSimMainPath, builtinCatalog } from "./backend-sim-catalog.js";

const minimal = `
nodeId: gpu-1
stateDir: /var/lib/warden
ports: { min: 40000, max: 40099 }
catalog:
  llama:
    command: /opt/llama/grpc-server
    args: ["--threads", "8"]
    envAllow: [PATH, "HF_*"]
`;

function errorOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    if (isWardenError(err, Code.InvalidArgument)) return err.rawMessage;
    throw err;
  }
  throw new Error("expected INVALID_ARGUMENT");
}

describe("agent config", () => {
  it("fills DESIGN §5 defaults", () => {
    const c = parseAgentConfig(minimal);
    expect(c).toMatchObject({
      nodeId: "gpu-1",
      portMin: 40000,
      portMax: 40099,
      portStart: "first",
      graceMs: 10_000,
      freeTimeoutMs: 5_000,
      heartbeatIntervalMs: 1_000,
      loadDeadlineMs: 600_000,
      readiness: { attempts: 20, intervalMs: 2_000, initialIntervalMs: 50 },
      nvidiaSmiPath: "nvidia-smi",
      gpus: [],
      listen: "127.0.0.1:7443",
      advertiseAddress: "127.0.0.1:7443",
    });
    expect(c.catalog.llama).toEqual({ command: "/opt/llama/grpc-server", args: ["--threads", "8"], env: {}, envAllow: ["PATH", "HF_*"], cwd: undefined, profile: "plain" });
  });

  it("peerFetch: on by default, false takes the node out of peer fetch, anything else is refused naming the key", () => {
    expect(parseAgentConfig(minimal).peerFetch).toBe(true);
    expect(parseAgentConfig(`${minimal}peerFetch: false\n`).peerFetch).toBe(false);
    expect(errorOf(() => parseAgentConfig(`${minimal}peerFetch: sometimes\n`))).toMatch(/^peerFetch: must be true or false/);
  });

  it("parses duration strings", () => {
    const c = parseAgentConfig(`${minimal}grace: 2s\nreadiness: { attempts: 5, interval: 250ms }\nports2: 1\n`.replace("ports2: 1\n", ""));
    expect(c.graceMs).toBe(2_000);
    expect(c.readiness).toEqual({ attempts: 5, intervalMs: 250, initialIntervalMs: 50 });
  });

  it("rejects unknown and invalid fields with the field's path", () => {
    expect(errorOf(() => parseAgentConfig(`${minimal}graceMs: 10\n`))).toMatch(/^graceMs: unknown field/);
    expect(errorOf(() => parseAgentConfig(`${minimal}grace: soon\n`))).toMatch(/^grace: invalid duration/);
    expect(errorOf(() => parseAgentConfig(minimal.replace("args:", "argv:")))).toMatch(/^catalog\.llama\.argv: unknown field/);
    expect(errorOf(() => parseAgentConfig(minimal.replace("/opt/llama/grpc-server", "grpc-server")))).toMatch(/^catalog\.llama\.command: must be an absolute path/);
    expect(errorOf(() => parseAgentConfig(minimal.replace("max: 40099", "max: 3")))).toMatch(/^ports\.max: /);
    expect(errorOf(() => parseAgentConfig(minimal.replace("max: 40099", "max: 40099, start: middle")))).toMatch(/^ports\.start: expected first or random/);
    expect(parseAgentConfig(minimal.replace("max: 40099", "max: 40099, start: random")).portStart).toBe("random");
    expect(errorOf(() => parseAgentConfig(minimal.replace("nodeId: gpu-1", "nodeId: -x")))).toMatch(/^nodeId: /);
    expect(errorOf(() => parseAgentConfig(`${minimal}gpus: ["zero"]\n`))).toMatch(/^gpus\[0\]: /);
    expect(errorOf(() => parseAgentConfig(`${minimal}readiness: { tries: 3 }\n`))).toMatch(/^readiness\.tries: unknown field/);
    expect(errorOf(() => parseAgentConfig(minimal.replace('"HF_*"', '"BAD-NAME"')))).toMatch(/^catalog\.llama\.envAllow\[1\]: /);
    expect(errorOf(() => parseAgentConfig("nodeId: [unclosed"))).toMatch(/^\(yaml\): /);
    expect(errorOf(() => resolveAgentConfig({ nodeId: "n", stateDir: "/s", catalog: {} }))).toMatch(/^ports: required/);
  });

  it("offers backend-sim as a builtin catalog entry", () => {
    const c = parseAgentConfig(`${minimal}  sim:\n    builtin: backend-sim\n    env: { SIM_PREDICT_TOKENS: "5" }\n`, builtinCatalog);
    expect(c.catalog.sim?.command).toBe(process.execPath);
    // From sources: through tsx, or the prebuilt bundle the test runner names (WARDEN_BACKEND_SIM_BUNDLE).
    const bundle = process.env["WARDEN_BACKEND_SIM_BUNDLE"];
    expect(c.catalog.sim?.args).toEqual(bundle === undefined ? ["--import", "tsx", backendSimMainPath] : [bundle]);
    expect(c.catalog.sim?.env).toEqual({ SIM_PREDICT_TOKENS: "5" });
    expect(errorOf(() => parseAgentConfig(`${minimal}  sim:\n    builtin: nope\n`, builtinCatalog))).toMatch(/^catalog\.sim\.builtin: unknown builtin/);
  });

  it("refuses durations and counts above their documented maxima, naming the YAML path", () => {
    const over: [string, RegExp][] = [
      ["grace: 25h", /^grace: duration must be at most 24h/],
      ["loadDeadline: 2d", /^loadDeadline: duration must be at most 24h/],
      ["stopDeadline: 2147483648", /^stopDeadline: /],
      ["freeTimeout: 1d1ms", /^freeTimeout: /],
      ["heartbeatInterval: 2h", /^heartbeatInterval: duration must be at most 1h/],
      ["adoptedPoll: 61m", /^adoptedPoll: /],
      ["orphanScanInterval: 1d", /^orphanScanInterval: /],
      ["healthInterval: 18446744073709551615", /^healthInterval: /],
      ["readiness: { interval: 2h }", /^readiness\.interval: /],
      ["readiness: { initialInterval: 2h }", /^readiness\.initialInterval: /],
      ["readiness: { attempts: 10001 }", /^readiness\.attempts: /],
      ["logBufferLines: 100001", /^logBufferLines: /],
      [`gpus: [${Array.from({ length: 65 }, () => '"0"').join(", ")}]`, /^gpus: at most 64/],
    ];
    for (const [line, re] of over) expect(errorOf(() => parseAgentConfig(`${minimal}${line}\n`))).toMatch(re);
    expect(errorOf(() => parseAgentConfig(minimal.replace("max: 40099 }", "max: 40099, quarantine: 31d }")))).toMatch(/^ports\.quarantine: /);
    // the maxima themselves are accepted
    const c = parseAgentConfig(`${minimal}grace: 24h\nheartbeatInterval: 1h\nlogBufferLines: 100000\n`);
    expect(c).toMatchObject({ graceMs: 86_400_000, heartbeatIntervalMs: 3_600_000, logBufferLines: 100_000 });
    // the catalog: at most 256 backends (the names the agent registers; the coordinator's bound)
    const catalogOf = (n: number) => ({ nodeId: "n", stateDir: "/s", ports: { min: 40000, max: 40099 }, catalog: Object.fromEntries(Array.from({ length: n }, (_, i) => [`b${String(i)}`, { command: "/bin/true" }])) });
    expect(errorOf(() => resolveAgentConfig(catalogOf(257)))).toMatch(/^catalog: at most 256 backends, got 257/);
    expect(Object.keys(resolveAgentConfig(catalogOf(256)).catalog)).toHaveLength(256);
  });
});
