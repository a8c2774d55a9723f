/**
 * A transient placement state is transient on the command line, against real processes: with no
 * node registered (a coordinator just started, or a new leader whose agents have not found it
 * yet), `warden models load` exits 3 (UNAVAILABLE: try again) — never 7, which a script reads as
 * "no node can ever take this model" and gives up on — and `warden explain` says the load would
 * wait; once an agent has registered, the same command loads the model (exit 0).
 */
import { spawnSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient } from "@warden/grpc";
import { AdminService, NodeState } from "@warden/proto";
import { simModel, until } from "./support/coordinator-harness.js";
import { uniqueTag } from "./support/agent-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { freePort } from "./support/free-port.js";

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
  dir = await mkdtemp(join(tmpdir(), "warden-transient-exit-"));
  coord = await startCoordinatorProcess(join(dir, "c.yaml"), {
    listen: `127.0.0.1:${String(await freePort())}`,
    stateDir: join(dir, "state"),
    embeddedAgent: false,
    recoveryWindow: "200ms",
    // Admission gives up after loadWait (no node is ready: transient), well within the CLI's deadline: the answer is
    // then the coordinator's verdict on the cluster's state, not the caller's timeout.
    policy: { enforcementRetries: 3, enforcementRetryInterval: "200ms" },
    loadWait: "600ms",
    models: [simModel("m")],
  });
}, 90_000);

afterAll(async () => {
  await agent?.cleanup();
  await coord?.kill();
  await rm(dir, { recursive: true, force: true });
}, 60_000);

describe("transient placement states on the command line (real coordinator, agent and CLI processes)", { timeout: 180_000 }, () => {
  it("no node registered: load exits 3 naming why, explain says it would wait; with an agent registered the same load exits 0", async () => {
    const addr = coord!.address;
    const load = warden(["models", "load", "m", "--addr", addr, "--timeout", "20s"]);
    expect(load.code, load.stderr.split("\n").filter((l) => !l.startsWith("loading ")).join("\n")).toBe(3);
    expect(load.stderr).toMatch(/no node|not reported|UNAVAILABLE|unavailable/i);
    const explain = warden(["explain", "m", "--addr", addr]);
    expect(explain.code, explain.stderr).toBe(0);
    expect(explain.stdout).toMatch(/WAIT/i);

    agent = await startRemoteAgent({ coordinator: addr, nodeId: "n1", tag: uniqueTag("transient-exit") });
    const admin = createClient(AdminService, addr);
    try {
      await until("n1 ready", async () => (await admin.listNodes({})).nodes.some((n) => n.nodeId === "n1" && n.state === NodeState.READY), 60_000);
    } finally {
      admin.close();
    }
    const again = warden(["models", "load", "m", "--addr", addr, "--timeout", "60s"]);
    expect(again.code, again.stderr).toBe(0);
  });
});
