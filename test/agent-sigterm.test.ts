/**
 * SIGTERM of an agent process that a coordinator watches: the agent ends the
 * watch streams itself (UNAVAILABLE "agent shutting down", so the watcher
 * re-opens on its successor), its gRPC server drains without waiting out the
 * grace, and its last log line says it stopped and how.
 */
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient } from "@warden/grpc";
import { AgentService } from "@warden/proto";
import { Code, isWardenError } from "@warden/common";
import { randomPortRange, simCatalog, tempDir, uniqueTag } from "./support/agent-harness.js";
import { startAgentProcess, writeAgentConfig, type AgentProcess } from "./support/agent-process.js";

let dir: string;
let proc: AgentProcess | undefined;

beforeAll(async () => {
  dir = await tempDir("warden-agent-sigterm");
  const ports = randomPortRange(4);
  await writeAgentConfig(join(dir, "agent.yaml"), {
    nodeId: "sigterm-node",
    stateDir: join(dir, "state"),
    ports: { min: ports.min, max: ports.max },
    catalog: { sim: simCatalog(uniqueTag("agent-sigterm")) },
    nvidiaSmi: "",
  });
  proc = await startAgentProcess(join(dir, "agent.yaml"));
});

afterAll(async () => {
  if (proc !== undefined && proc.child.exitCode === null) proc.child.kill("SIGKILL");
  await rm(dir, { recursive: true, force: true });
});

describe("an agent stopped by SIGTERM", () => {
  it("ends its watch streams, drains at once and logs a last line saying so", async () => {
    const agent = proc;
    if (agent === undefined) throw new Error("agent not started");
    const client = createClient(AgentService, agent.address);
    // A coordinator's WatchBackends stream, open when the signal comes.
    const watch = client.watchBackends({}, { timeoutMs: 120_000 });
    const ended = (async (): Promise<unknown> => {
      try {
        let events = 0;
        for await (const ev of watch) if (ev.event.case !== undefined) events++;
        return `ended without an error after ${String(events)} events`;
      } catch (err) {
        return err;
      }
    })();
    // The stream is open once the agent counts a call in flight; ListBackends answers after it.
    await client.listBackends({}, { timeoutMs: 30_000 });
    const code = await agent.terminate();
    client.close();
    expect(code).toBe(0);
    const err = await ended;
    expect(isWardenError(err) ? [err.code, err.rawMessage] : err).toEqual([Code.Unavailable, "agent shutting down"]);
    const last = JSON.parse(agent.lines.filter((l) => l.startsWith("{")).at(-1) ?? "{}") as Record<string, unknown>;
    expect([last["msg"], last["server"], last["signal"]]).toEqual(["agent stopped", "drained", "SIGTERM"]);
  });
});
