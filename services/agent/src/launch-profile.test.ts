import { describe, expect, it } from "vitest";
import { Code, isWardenError } from "@warden/common";
import { parseAgentConfig } from "./agent-config.js";
import { localaiEnv } from "./launch-profile.js";

const base = `nodeId: gpu-1
stateDir: /var/lib/warden
ports: { min: 40000, max: 40099 }
modelsPath: /srv/models
catalog:
  sim:
    command: /usr/bin/true
  llama-cpp:
    profile: localai
    command: /opt/localai/backends/cuda12-llama-cpp/run.sh
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

describe("catalog profile localai", () => {
  it("runs in the executable's directory with no base args", () => {
    const c = parseAgentConfig(base);
    expect(c.catalog["llama-cpp"]).toMatchObject({ profile: "localai", args: [], cwd: "/opt/localai/backends/cuda12-llama-cpp" });
    expect(c.catalog.sim).toMatchObject({ profile: "plain", cwd: undefined });
    expect(c.modelsPath).toBe("/srv/models");
  });

  it("refuses argv an upstream backend would exit on, naming the field and its line", () => {
    const msg = errorOf(() => parseAgentConfig(`${base}    args: ["--threads", "16"]\n`));
    expect(msg).toMatch(/^catalog\.llama-cpp\.args: profile localai: upstream backends accept only --addr/);
    expect(msg).toMatch(/\(line 11\)$/);
  });

  it("names the line of any field error in the YAML", () => {
    expect(errorOf(() => parseAgentConfig(base.replace("profile: localai", "profile: lokalai")))).toMatch(/^catalog\.llama-cpp\.profile: must be one of plain, localai, got "lokalai" \(line 9\)$/);
    expect(errorOf(() => parseAgentConfig(`${base}grace: soon\n`))).toMatch(/^grace: invalid duration.*\(line 11\)$/);
  });

  it("refuses a parent-watch setting (it would defeat adoption) and requires modelsPath", () => {
    expect(errorOf(() => parseAgentConfig(`${base}    env: { LOCALAI_BACKEND_PARENT_WATCH: "true" }\n`))).toMatch(/^catalog\.llama-cpp\.env\.LOCALAI_BACKEND_PARENT_WATCH: profile localai: the agent sets it to false/);
    expect(errorOf(() => parseAgentConfig(base.replace("modelsPath: /srv/models\n", "")))).toMatch(/^modelsPath: required by catalog\.llama-cpp \(profile localai\)/);
    expect(errorOf(() => parseAgentConfig(base.replace("modelsPath: /srv/models", "modelsPath: models")))).toMatch(/^modelsPath: must be an absolute path/);
  });

  it("points the HF caches at the models path unless the agent's environment sets them, and turns the parent watch off", () => {
    expect(localaiEnv({ HF_HOME: "/cache/hf", TRANSFORMERS_CACHE: "" }, "/srv/models")).toEqual({ HF_HOME: "/cache/hf", TRANSFORMERS_CACHE: "/srv/models", HUGGINGFACE_HUB_CACHE: "/srv/models", LOCALAI_BACKEND_PARENT_WATCH: "false" });
  });
});
