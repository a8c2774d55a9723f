/**
 * Every command an agent runs is logged with who asked, whatever the
 * transport: over plaintext loopback gRPC (no caller identity: the peer's
 * address) and in process (the coordinator's embedded agent). The mutual
 * TLS case, with certificate identities, is in agent-coordinator-only.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { inProcessClient } from "@warden/grpc";
import { AgentService } from "@warden/proto";
import { newIncarnation, randomPortRange, startAgentHarness, uniqueTag, type AgentHarness } from "./support/agent-harness.js";
import { recordingLogger, type RecordingLogger } from "./support/recording-logger.js";

let h: AgentHarness;
let log: RecordingLogger;

beforeAll(async () => {
  log = recordingLogger();
  h = await startAgentHarness({ tag: uniqueTag("command-audit"), ports: randomPortRange(4), logger: log });
}, 60_000);

afterAll(async () => {
  await h.close();
});

const commandLines = (incarnation: string) => log.lines.filter((l) => l.msg === "agent command" && l.meta["incarnation"] === incarnation);

describe("an agent logs every command with its caller", () => {
  it("names a plaintext caller by its address, with the command's fields", async () => {
    const incarnation = newIncarnation();
    const r = await h.client.stopBackend({ address: "127.0.0.1:1", incarnation, force: true, reason: "audit-test" }, { timeoutMs: 20_000 });
    expect(r).toBeDefined();
    const [line, ...more] = commandLines(incarnation);
    expect(more).toEqual([]);
    expect(line?.meta["method"]).toBe("StopBackend");
    expect(String(line?.meta["caller"])).toMatch(/^unauthenticated (ipv4:)?127\.0\.0\.1:\d+$/);
    expect(line?.meta["force"]).toBe(true);
    expect(line?.meta["reason"]).toBe("audit-test");
  });

  it("names an in-process call (the coordinator's embedded agent) in-process, and logs no read", async () => {
    const client = inProcessClient(AgentService, h.agent.service);
    const incarnation = newIncarnation();
    await client.stopBackend({ address: "127.0.0.1:1", incarnation, force: false, reason: "audit-test" }, { timeoutMs: 20_000 });
    expect(commandLines(incarnation).map((l) => [l.meta["method"], l.meta["caller"]])).toEqual([["StopBackend", "in-process"]]);
    const before = log.lines.filter((l) => l.msg === "agent command").length;
    await client.listBackends({}, { timeoutMs: 20_000 });
    expect(log.lines.filter((l) => l.msg === "agent command").length).toBe(before);
  });
});
