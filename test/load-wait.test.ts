/**
 * "No node can take this model now" answers the same way on every surface, against real processes:
 * a coordinator and one agent whose only node is draining. gRPC (LoadModel and an on-demand
 * Predict), HTTP (a real fetch of /v1/chat/completions) and the CLI (`models load`, `predict`) each
 * wait the configured `loadWait` and then answer UNAVAILABLE naming the reason — gRPC UNAVAILABLE,
 * HTTP 503 with Retry-After in OpenAI's error shape, CLI exit 3 — and the CLI's progress line says
 * "waiting for a node: <reason>", not "loading". A model no node could ever take (a selector no
 * node matches) is still refused as permanent: exit 7.
 */
import { spawnSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "@warden/common";
import { createClient } from "@warden/grpc";
import { AdminService, InferenceService, NodeState } from "@warden/proto";
import { simModel, until } from "./support/coordinator-harness.js";
import { uniqueTag } from "./support/agent-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { freePort } from "./support/free-port.js";
import { refusedWith } from "./support/refusal.js";

const root = resolve(import.meta.dirname, "..");
const cliMain = join(root, "services", "cli", "src", "main.ts");

function warden(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, ["--import", "tsx", cliMain, ...args], { cwd: root, env: { ...process.env, NO_COLOR: "1" }, encoding: "utf8", timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

let dir = "";
let coord: CoordinatorProcess | undefined;
let agent: RemoteAgent | undefined;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-load-wait-"));
  coord = await startCoordinatorProcess(join(dir, "c.yaml"), {
    listen: `127.0.0.1:${String(await freePort())}`,
    httpListen: "127.0.0.1:0",
    stateDir: join(dir, "state"),
    embeddedAgent: false,
    recoveryWindow: "200ms",
    // Long enough for the CLI's progress line to show the wait, short for the test.
    loadWait: "5s",
    policy: { enforcementRetries: 2, enforcementRetryInterval: "200ms" },
    models: [simModel("m"), simModel("never", { selector: { gpu: "none-such" } })],
  });
  agent = await startRemoteAgent({ coordinator: coord.address, nodeId: "n1", tag: uniqueTag("load-wait") });
  const admin = createClient(AdminService, coord.address);
  try {
    await until("n1 ready", async () => (await admin.listNodes({})).nodes.some((n) => n.nodeId === "n1" && n.state === NodeState.READY), 60_000);
    await admin.drainNode({ nodeId: "n1" });
  } finally {
    admin.close();
  }
}, 120_000);

afterAll(async () => {
  await agent?.cleanup();
  await coord?.kill();
  await rm(dir, { recursive: true, force: true });
}, 60_000);

describe("a load no node can take now: one answer everywhere (real coordinator, agent, HTTP and CLI)", { timeout: 240_000 }, () => {
  it("gRPC LoadModel and Predict: UNAVAILABLE naming the draining node, the reason in details", async () => {
    const admin = createClient(AdminService, coord!.address);
    const inference = createClient(InferenceService, coord!.address);
    try {
      const load = await refusedWith(admin.loadModel({ model: "m" }, { timeoutMs: 60_000 }));
      expect(load.code, load.message).toBe(Code.Unavailable);
      expect(load.rawMessage).toContain("node is draining");
      expect(String(load.details["reason"])).toContain("node is draining");
      const call = await refusedWith(inference.predict({ model: "m", options: { Prompt: "hi", Tokens: 1 } }, { timeoutMs: 60_000 }));
      expect(call.code, call.message).toBe(Code.Unavailable);
      expect(call.rawMessage).toContain("node is draining");
    } finally {
      admin.close();
      inference.close();
    }
  });

  it("HTTP: 503 with Retry-After and the reason in OpenAI's error shape", async () => {
    const r = await fetch(`http://${coord!.httpAddress ?? ""}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] }),
      signal: AbortSignal.timeout(60_000),
    });
    const body = (await r.json()) as { error: { message: string; type: string } };
    expect(r.status, JSON.stringify(body)).toBe(503);
    expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(body.error.type).toBe("server_error");
    expect(body.error.message).toContain("node is draining");
  });

  it("CLI models load and predict: exit 3 naming the reason, the progress line says waiting for a node", () => {
    for (const args of [
      ["models", "load", "m"],
      ["predict", "m", "hi"],
    ]) {
      const r = warden([...args, "--addr", coord!.address, "--timeout", "60s"]);
      expect(r.code, `${args.join(" ")}: ${r.stderr}`).toBe(3);
      expect(r.stderr).toMatch(/^warden: .*node is draining/m);
      expect(r.stderr).toMatch(/^waiting for a node: .*node is draining/m);
    }
  });

  it("a model no node could ever take (its selector matches no node) is refused as before: exit 7 (a guard: unchanged by loadWait)", () => {
    const r = warden(["models", "load", "never", "--addr", coord!.address, "--timeout", "60s"]);
    expect(r.code, r.stderr).toBe(7);
    expect(r.stderr).toMatch(/^warden: .*cannot load (model )?"?never/m);
  });
});
