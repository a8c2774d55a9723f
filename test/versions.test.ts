/**
 * Versions across the cluster: agents send theirs in Register, ListNodes shows
 * it per node (the embedded agent's is the coordinator's own), a mismatch is a
 * warning in the coordinator's log and under `warden nodes ls`, and a version
 * string outside its bound is refused.
 */
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError, wardenVersion } from "@warden/common";
import { createClient } from "@warden/grpc";
import { NodeService } from "@warden/proto";
import { startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { startAgentProcess, writeAgentConfig, type AgentProcess } from "./support/agent-process.js";
import { tempDir } from "./support/agent-harness.js";
import { testPortRange } from "./support/port-range.js";
import { versionWarning } from "../services/cli/src/render.js";

const root = resolve(import.meta.dirname, "..");
let tc: TestCoordinator;
let agent: AgentProcess | undefined;

beforeAll(async () => {
  tc = await startTestCoordinator({ models: [] });
});
afterAll(async () => {
  await agent?.terminate();
  await tc.close();
});

describe("Warden versions", () => {
  it("the release version is the installable package's version", () => {
    const pkg = JSON.parse(readFileSync(join(root, "services", "cli", "package.json"), "utf8")) as { version: string };
    expect(wardenVersion).toBe(pkg.version);
  });

  it("ListNodes shows the version each agent registered with: the embedded one and a separate agent process", async () => {
    const dir = await tempDir("warden-versions-");
    const cfg = join(dir, "agent.yaml");
    await writeAgentConfig(cfg, { nodeId: "v-node", stateDir: join(dir, "state"), ports: testPortRange(4), nvidiaSmi: "", catalog: { "backend-sim": { builtin: "backend-sim" } } });
    agent = await startAgentProcess(cfg, ["--coordinator", tc.c.address]);
    const nodes = await until("the agent registered", async () => {
      const r = await tc.admin.listNodes({});
      return r.nodes.some((n) => n.nodeId === "v-node") ? r.nodes : undefined;
    });
    expect(nodes.find((n) => n.nodeId === "local")?.version).toBe(wardenVersion);
    expect(nodes.find((n) => n.nodeId === "v-node")?.version).toBe(wardenVersion);
    expect(versionWarning(nodes)).toBeUndefined();
  });

  it("an agent of another version is registered, shown with its version, and warned about", async () => {
    const node = createClient(NodeService, tc.c.address);
    try {
      await node.register({ nodeId: "old-node", address: "127.0.0.1:1", bootEpoch: 1n, version: "0.0.9" });
      const nodes = (await tc.admin.listNodes({})).nodes;
      expect(nodes.find((n) => n.nodeId === "old-node")?.version).toBe("0.0.9");
      expect(versionWarning(nodes)).toContain("old-node=0.0.9");

      const err = await node.register({ nodeId: "bad-node", address: "127.0.0.1:1", bootEpoch: 1n, version: "x".repeat(65) }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(WardenError);
      expect((err as WardenError).code).toBe(Code.InvalidArgument);
      expect((err as WardenError).rawMessage).toContain("version");
      expect((await tc.admin.listNodes({})).nodes.some((n) => n.nodeId === "bad-node")).toBe(false);
    } finally {
      node.close();
    }
  });
});
