/**
 * The coordinator's audit events name the operator who asked, however the
 * request came: the Admin API with a token (plaintext, auth on), and the
 * dashboard's buttons (which call the Admin API in process on the browser
 * user's behalf). The embedded agent logs each command as in-process. A real
 * coordinator process (`warden up`: HTTP listener, embedded agent running
 * backend-sim); mutual TLS is in agent-coordinator-only.test.ts.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient } from "@warden/grpc";
import { AdminService, InferenceService } from "@warden/proto";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { simModel } from "./support/coordinator-harness.js";
import { testPortRange } from "./support/port-range.js";
import { withToken, writeTokensFile } from "./support/auth-tokens.js";

let dir = "";
let coord: CoordinatorProcess;
let tokens: { ops: string; viewer: string; inf: string };
let admin: ReturnType<typeof createClient<typeof AdminService>>;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-admin-actor-"));
  const t = await writeTokensFile(dir, { ops: { role: "operator" }, viewer: { role: "viewer" }, inf: { role: "inference" } });
  tokens = t.tokens;
  coord = await startCoordinatorProcess(
    join(dir, "coordinator.yaml"),
    {
      listen: "127.0.0.1:0",
      httpListen: "127.0.0.1:0",
      stateDir: join(dir, "state"),
      embeddedAgent: true,
      auth: { tokensFile: t.path },
      agent: { nodeId: "local", ports: { ...testPortRange(), quarantine: "1s" }, readiness: { attempts: 100, interval: "200ms", initialInterval: "20ms" }, grace: "3s", nvidiaSmi: "", catalog: { "backend-sim": { builtin: "backend-sim" } } },
      recoveryWindow: 0,
      models: [simModel("by-api"), simModel("by-dashboard"), simModel("by-inference", { knobs: { predict_tokens: 1 } })],
    },
    60_000,
    { via: "warden-up" },
  );
  admin = createClient(AdminService, coord.address, withToken(tokens.ops));
}, 120_000);

afterAll(async () => {
  admin.close();
  coord.child.kill("SIGTERM");
  await coord.exited;
  await rm(dir, { recursive: true, force: true });
}, 60_000);

async function dashboardAction(action: string, token: string, body: unknown): Promise<number> {
  const res = await fetch(`http://${coord.httpAddress ?? ""}/api/dashboard/actions/${action}`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${token}` }, body: JSON.stringify(body) });
  await res.arrayBuffer();
  return res.status;
}

describe("audit events name the operator who asked", () => {
  it("an Admin API load and unload: the token's name and role, on backend.loaded and eviction.started, and in the coordinator's log", async () => {
    const loaded = await admin.loadModel({ model: "by-api" }, { timeoutMs: 60_000 });
    const incarnation = loaded.instance?.incarnation ?? "";
    expect((await coord.waitForEvent("backend.loaded", (e) => e.incarnation === incarnation))["actor"]).toBe('token "ops" (operator)');
    await admin.unloadModel({ model: "by-api", force: false }, { timeoutMs: 60_000 });
    expect((await coord.waitForEvent("eviction.started", (e) => e.incarnation === incarnation))["actor"]).toBe('token "ops" (operator)');
    const logged = coord.logLines.filter((l) => l["msg"] === "admin command").map((l) => [l["method"], l["actor"], l["model"]]);
    expect(logged).toEqual(expect.arrayContaining([["LoadModel", 'token "ops" (operator)', "by-api"], ["UnloadModel", 'token "ops" (operator)', "by-api"]]));
    // The embedded agent ran both commands for the coordinator, in process.
    const agentCommands = coord.logLines.filter((l) => l["msg"] === "agent command" && l["incarnation"] === incarnation).map((l) => [l["method"], l["caller"], l["requestedBy"]]);
    expect(agentCommands).toEqual(expect.arrayContaining([["StartBackend", "in-process", 'token "ops" (operator)'], ["StopBackend", "in-process", 'token "ops" (operator)']]));
  }, 120_000);

  it("a dashboard button: the browser user's token, and where the browser was", async () => {
    expect(await dashboardAction("load", tokens.ops, { model: "by-dashboard" })).toBe(200);
    const ev = await coord.waitForEvent("backend.loaded", (e) => e.model === "by-dashboard");
    expect(ev["actor"]).toMatch(/^dashboard, token "ops" \(operator\), from (::ffff:)?127\.0\.0\.1$/);
    // A viewer's button press is refused before anything is asked, so nothing is recorded for it.
    expect(await dashboardAction("unload", tokens.viewer, { model: "by-dashboard" })).toBe(403);
    expect(await dashboardAction("unload", tokens.ops, { model: "by-dashboard" })).toBe(200);
    const stop = await coord.waitForEvent("eviction.started", (e) => e.incarnation === ev.incarnation);
    expect(stop["actor"]).toBe(ev["actor"]);
  }, 120_000);

  it("a load an inference call triggers is the coordinator's own decision: no actor", async () => {
    const inference = createClient(InferenceService, coord.address, withToken(tokens.inf));
    try {
      await inference.predict({ model: "by-inference", options: { Prompt: "hi" } }, { timeoutMs: 60_000 });
    } finally {
      inference.close();
    }
    const ev = await coord.waitForEvent("backend.loaded", (e) => e.model === "by-inference");
    expect(ev.incarnation).not.toBe("");
    expect(ev["actor"]).toBeUndefined();
    const start = coord.logLines.find((l) => l["msg"] === "agent command" && l["method"] === "StartBackend" && l["incarnation"] === ev.incarnation);
    expect(start?.["caller"]).toBe("in-process");
    expect(start).not.toHaveProperty("requestedBy");
  }, 120_000);
});
