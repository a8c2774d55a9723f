/**
 * The stop sequence's Free goes through the agent's leader-epoch fence, over
 * real processes: a coordinator process (no HA: leader epoch 0), an agent
 * process, a backend-sim that logs every call. A newer leader's command
 * (epoch 5, sent to the agent directly) supersedes the coordinator, which
 * does not know it (a coordinator without HA never steps down; an HA one
 * learns it only at the next heartbeat or refusal). Its graceful unload must
 * then change nothing: the Free is refused by the agent — typed, naming
 * leader_epoch — and never reaches the backend, whose model stays loaded.
 * Before the Free went through the agent, the coordinator called the
 * backend's Free itself and unloaded the model (the backend logged "Free").
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it, onTestFailed } from "vitest";
import { createClient } from "@warden/grpc";
import { AdminService, AgentService, InferenceService, NodeState, UnloadOutcome } from "@warden/proto";
import { newIncarnation, pidAlive, uniqueTag } from "./support/agent-harness.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { simModel, until } from "./support/coordinator-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";

const tag = uniqueTag("free-fence");
let dir = "";
let coord: CoordinatorProcess | undefined;
let agent: RemoteAgent | undefined;

afterAll(async () => {
  await agent?.cleanup();
  if (coord !== undefined) {
    coord.child.kill("SIGTERM");
    await coord.exited;
  }
  if (dir !== "") await rm(dir, { recursive: true, force: true });
  expect(await liveRemoteAgents()).toEqual([]);
}, 60_000);

describe("Free goes through the agent's leader-epoch fence", { timeout: 180_000 }, () => {
  it("a coordinator superseded by a newer leader epoch frees nothing: the agent refuses its Free (typed, naming leader_epoch), the backend never sees it and still serves", async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-free-fence-"));
    const calls = join(dir, "m.calls");
    const c = await startCoordinatorProcess(join(dir, "coordinator.yaml"), {
      listen: "127.0.0.1:0",
      stateDir: join(dir, "state"),
      embeddedAgent: false,
      recoveryWindow: 0,
      stop: { timeout: "30s", freeTimeout: "10s" },
      models: [simModel("m", { knobs: { call_log: calls } })],
    });
    coord = c;
    onTestFailed(() => {
      console.error(`--- coordinator log (last 80 lines):\n${c.logLines.slice(-80).map((l) => JSON.stringify(l)).join("\n")}\n--- stderr:\n${c.stderr.join("").slice(-2_000)}`);
    });
    const a = await startRemoteAgent({ coordinator: c.address, nodeId: "a", tag });
    agent = a;
    const admin = createClient(AdminService, c.address);
    const inference = createClient(InferenceService, c.address);
    const agentClient = createClient(AgentService, a.address);
    try {
      await until("node a ready", async () => (await admin.listNodes({})).nodes.some((n) => n.nodeId === "a" && n.state === NodeState.READY), 60_000);
      const loaded = await admin.loadModel({ model: "m" }, { timeoutMs: 60_000 });
      const inc = loaded.instance?.incarnation ?? "";
      expect(inc).not.toBe("");
      const [pid] = await a.liveBackends();
      expect(pid).toBeDefined();

      // A newer leader (epoch 5) commands the agent; this coordinator (epoch 0) is not told.
      const raised = await agentClient.stopBackend({ address: "127.0.0.1:1", incarnation: newIncarnation(), force: true, reason: "newer leader", leaderEpoch: 5n }, { timeoutMs: 10_000 });
      expect(raised.outcome.case).toBe("alreadyGone");
      expect((await agentClient.listBackends({}, { timeoutMs: 10_000 })).leaderEpoch).toBe(5n);

      // Its graceful unload: the Free is refused by the agent, typed; nothing is stopped.
      const out = await admin.unloadModel({ model: "m", force: false }, { timeoutMs: 60_000 });
      expect(out.outcome).toBe(UnloadOutcome.REGISTERED_AGAIN);
      expect(out.error).toContain("leader_epoch: 0 is older than the newest leader epoch this agent has seen (5)");

      // Ground truth: the backend never saw a Free, the same process runs and still serves its model.
      const log = (await readFile(calls, "utf8")).split("\n");
      expect(log.filter((l) => l === "Free")).toEqual([]);
      expect(await a.liveBackends()).toEqual([pid]);
      expect(await pidAlive(pid!)).toBe(true);
      const r = await inference.predict({ model: "m", options: { Prompt: "hi", Tokens: 2 } }, { timeoutMs: 30_000 });
      expect(Buffer.from(r.reply?.message ?? new Uint8Array()).toString("utf8")).toContain("m:");
    } finally {
      admin.close();
      inference.close();
      agentClient.close();
    }
  });
});
