import { readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { WardenError } from "@warden/common";
import { Code } from "@warden/common";
import { createClient, type Client } from "@warden/grpc";
import { AgentService, StartFailureCode, type StartBackendResponse } from "@warden/proto";
import { leaderEpochFileName } from "../services/agent/src/leader-fence-store.js";
import { killLeftBehind, liveTaggedSims, newIncarnation, pidAlive, randomPortRange, simCatalog, tempDir, uniqueTag } from "./support/agent-harness.js";
import { startAgentProcess, writeAgentConfig, type AgentProcess } from "./support/agent-process.js";
import { refusedWith } from "./support/refusal.js";

// HA fencing against the agent as a real process: a command from a
// leader epoch older than the newest the agent has seen is refused
// (FAILED_PRECONDITION naming leader_epoch) and changes nothing; the newest
// epoch survives kill -9 of the agent.
const fileTag = uniqueTag("agent-fencing");
const ports = randomPortRange(8);
const started: AgentProcess[] = [];
let dir: string;
let stateDir: string;
let configPath: string;

async function agent(): Promise<{ proc: AgentProcess; client: Client<typeof AgentService> }> {
  const proc = await startAgentProcess(configPath);
  started.push(proc);
  return { proc, client: createClient(AgentService, proc.address) };
}

async function start(client: Client<typeof AgentService>, incarnation: string, leaderEpoch: bigint): Promise<StartBackendResponse[]> {
  const out: StartBackendResponse[] = [];
  for await (const ev of client.startBackend({ incarnation, model: "fenced", backend: "sim", leaderEpoch }, { timeoutMs: 30_000 })) out.push(ev);
  return out;
}

/** What a refused command must not change: every entry's identity, pid, state and stop request. */
async function inventory(client: Client<typeof AgentService>): Promise<{ leaderEpoch: bigint; backends: unknown[] }> {
  const r = await client.listBackends({}, { timeoutMs: 10_000 });
  return { leaderEpoch: r.leaderEpoch, backends: r.backends.map((b) => ({ incarnation: b.incarnation, pid: b.pid, address: b.address, state: b.state, stopRequested: b.stopRequested === undefined ? null : b.stopRequested.reason })) };
}

function expectStale(e: WardenError, epoch: bigint, newest: bigint): void {
  expect(e.code).toBe(Code.FailedPrecondition);
  expect(e.rawMessage).toContain(`leader_epoch: ${String(epoch)} is older than the newest leader epoch this agent has seen (${String(newest)})`);
  expect(e.details).toMatchObject({ field: "leader_epoch", reason: "stale-leader-epoch", leaderEpoch: String(epoch), newestSeen: String(newest) });
}

beforeAll(async () => {
  dir = await tempDir("warden-agent-fencing");
  stateDir = join(dir, "state");
  configPath = join(dir, "agent.yaml");
  await writeAgentConfig(configPath, {
    nodeId: "fencing-node",
    stateDir,
    ports: { min: ports.min, max: ports.max, quarantine: "0s" },
    catalog: { sim: simCatalog(fileTag) },
    grace: "10s",
    readiness: { attempts: 60, interval: "500ms", initialInterval: "25ms" },
    nvidiaSmi: "",
    adoptedPoll: "100ms",
  });
});

afterAll(async () => {
  const leaked = await liveTaggedSims(fileTag);
  await killLeftBehind(started, leaked);
  await rm(dir, { recursive: true, force: true });
  expect(leaked).toEqual([]);
});

describe("agent leader-epoch fence", () => {
  it("accepts newer epochs, refuses older ones changing nothing, and keeps the fence across kill -9", async () => {
    const a = await agent();
    // A fresh agent has seen no epoch; epoch 0 (no HA) and then 5 are accepted.
    expect((await inventory(a.client)).leaderEpoch).toBe(0n);
    const zero = newIncarnation();
    const zeroEvents = await start(a.client, zero, 0n);
    const zeroReady = zeroEvents.at(-1)?.event;
    expect(zeroReady?.case).toBe("ready");
    const inc = newIncarnation();
    const events = await start(a.client, inc, 5n);
    const ready = events.at(-1)?.event;
    expect(ready?.case).toBe("ready");
    if (ready?.case !== "ready" || zeroReady?.case !== "ready") return;
    const { pid, address } = ready.value;
    expect(JSON.parse(await readFile(join(stateDir, leaderEpochFileName), "utf8"))).toEqual({ version: 1, leaderEpoch: "5" });
    const before = await inventory(a.client);
    expect(before.leaderEpoch).toBe(5n);

    // Older epochs — 4, and 0 now that a nonzero one was seen — are refused, whole.
    expectStale(await refusedWith(a.client.stopBackend({ address, incarnation: inc, force: true, reason: "stale", leaderEpoch: 4n }, { timeoutMs: 10_000 })), 4n, 5n);
    expectStale(await refusedWith(a.client.stopBackend({ address: zeroReady.value.address, incarnation: zero, force: true, reason: "stale", leaderEpoch: 0n }, { timeoutMs: 10_000 })), 0n, 5n);
    const other = newIncarnation();
    expectStale(await refusedWith(start(a.client, other, 4n)), 4n, 5n);
    // A repeat of the accepted start from an older epoch cannot attach to it either.
    expectStale(await refusedWith(start(a.client, inc, 3n)), 3n, 5n);
    expectStale(await refusedWith(a.client.stopOrphan({ pid, address, force: true, reason: "stale", leaderEpoch: 1n }, { timeoutMs: 10_000 })), 1n, 5n);
    expect(await inventory(a.client)).toEqual(before);
    expect(await pidAlive(pid)).toBe(true);
    expect(await pidAlive(zeroReady.value.pid)).toBe(true);

    // kill -9 and a new agent on the same state dir: the fence is still 5.
    a.client.close();
    a.proc.child.kill("SIGKILL");
    await a.proc.exited;
    const b = await agent();
    const adopted = await inventory(b.client);
    expect(adopted).toEqual(before);
    expectStale(await refusedWith(b.client.stopBackend({ address, incarnation: inc, force: true, reason: "stale", leaderEpoch: 4n }, { timeoutMs: 10_000 })), 4n, 5n);
    expect(await inventory(b.client)).toEqual(before);
    expect(await pidAlive(pid)).toBe(true);

    // The current epoch (5) and a newer one (7) act; 7 raises the fence, then 5 is stale.
    const s1 = await b.client.stopBackend({ address: zeroReady.value.address, incarnation: zero, force: true, reason: "current", leaderEpoch: 5n }, { timeoutMs: 30_000 });
    expect(s1.outcome.case).toBe("stopped");
    const s2 = await b.client.stopBackend({ address, incarnation: inc, force: false, reason: "newer", leaderEpoch: 7n }, { timeoutMs: 30_000 });
    expect(s2.outcome.case).toBe("stopped");
    expect(await pidAlive(pid)).toBe(false);
    expect((await inventory(b.client)).leaderEpoch).toBe(7n);
    expectStale(await refusedWith(start(b.client, newIncarnation(), 5n)), 5n, 7n);
    b.client.close();
    await b.proc.terminate();
  });

  it("a start admitted under one epoch that waited for its model lock while a newer epoch arrived spawns nothing (cancelled, naming leader_epoch)", async () => {
    const lockConfig = join(dir, "agent-lock.yaml");
    const lockPorts = randomPortRange(4);
    await writeAgentConfig(lockConfig, {
      nodeId: "fencing-lock-node",
      stateDir: join(dir, "state-lock"),
      ports: { min: lockPorts.min, max: lockPorts.max, quarantine: "0s" },
      catalog: { sim: simCatalog(fileTag) },
      // The graceful stop below holds the model's lock for this long (its backend ignores SIGTERM).
      grace: "3s",
      readiness: { attempts: 60, interval: "500ms", initialInterval: "25ms" },
      nvidiaSmi: "",
    });
    // At debug level the agent says when a start is admitted: the test orders its commands by the agent's own word.
    const proc = await startAgentProcess(lockConfig, [], 30_000, { LOG_LEVEL: "debug" });
    started.push(proc);
    const client = createClient(AgentService, proc.address);
    const logged = (msg: string, incarnation: string): boolean => proc.lines.some((l) => l.includes(`"msg":"${msg}"`) && l.includes(incarnation));
    const first = newIncarnation();
    const events: StartBackendResponse[] = [];
    for await (const ev of client.startBackend({ incarnation: first, model: "locked", backend: "sim", options: ["sim.ignore_sigterm:true"], leaderEpoch: 5n }, { timeoutMs: 30_000 })) events.push(ev);
    const ready = events.at(-1)?.event;
    expect(ready?.case).toBe("ready");
    if (ready?.case !== "ready") return;
    // A graceful stop of the model's backend takes the model's lock exclusively until the grace ends.
    const stopping = client.stopBackend({ address: ready.value.address, incarnation: first, force: false, reason: "hold-lock", leaderEpoch: 5n }, { timeoutMs: 60_000 });
    const waitUntil = async (what: string, cond: () => Promise<boolean>): Promise<void> => {
      const end = Date.now() + 30_000;
      while (!(await cond())) {
        if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    // "stopping backend" is logged once the stop holds the model's lock.
    await waitUntil("the stop to hold the lock", () => Promise.resolve(logged("stopping backend", first)));
    // The old leader's start (epoch 5) is admitted and waits for the lock ...
    const second = newIncarnation();
    const startEvents: StartBackendResponse[] = [];
    const starting = (async () => {
      for await (const ev of client.startBackend({ incarnation: second, model: "locked", backend: "sim", leaderEpoch: 5n }, { timeoutMs: 60_000 })) startEvents.push(ev);
    })();
    await waitUntil("the start to be admitted under epoch 5", () => Promise.resolve(logged("start admitted", second)));
    // ... while a newer leader's command (epoch 6) raises the fence.
    expect((await client.freeBackend({ incarnation: newIncarnation(), address: "127.0.0.1:1", leaderEpoch: 6n }, { timeoutMs: 10_000 })).outcome.case).toBe("alreadyGone");
    expect((await stopping).outcome.case).toBe("stopped");
    await starting;
    const last = startEvents.at(-1)?.event;
    expect(last?.case).toBe("failed");
    if (last?.case !== "failed") return;
    expect(last.value.code).toBe(StartFailureCode.CANCELLED);
    expect(last.value.message).toContain("leader_epoch: 5 is older than the newest leader epoch this agent has seen (6)");
    // Nothing was spawned for it: the agent lists no process of that incarnation.
    expect((await client.listBackends({}, { timeoutMs: 10_000 })).backends.filter((b) => b.incarnation === second)).toEqual([]);
    client.close();
    await proc.terminate();
  });

  it("FreeBackend: an older epoch is refused whole (the backend's Free is never called); the current one frees the backend the agent started; one it does not run is already gone", async () => {
    // Its own state dir: the test above left its fence at 7.
    const freeConfig = join(dir, "agent-free.yaml");
    const freePorts = randomPortRange(4);
    await writeAgentConfig(freeConfig, {
      nodeId: "fencing-free-node",
      stateDir: join(dir, "state-free"),
      ports: { min: freePorts.min, max: freePorts.max, quarantine: "0s" },
      catalog: { sim: simCatalog(fileTag) },
      grace: "10s",
      freeTimeout: "10s",
      readiness: { attempts: 60, interval: "500ms", initialInterval: "25ms" },
      nvidiaSmi: "",
    });
    const proc = await startAgentProcess(freeConfig);
    started.push(proc);
    const client = createClient(AgentService, proc.address);
    const calls = join(dir, "free-calls.log");
    const frees = async (): Promise<number> => (await readFile(calls, "utf8").catch(() => "")).split("\n").filter((l) => l === "Free").length;
    const inc = newIncarnation();
    const events: StartBackendResponse[] = [];
    for await (const ev of client.startBackend({ incarnation: inc, model: "freed", backend: "sim", options: [`sim.call_log:${calls}`], leaderEpoch: 5n }, { timeoutMs: 30_000 })) events.push(ev);
    const ready = events.at(-1)?.event;
    expect(ready?.case).toBe("ready");
    if (ready?.case !== "ready") return;
    const { address, pid } = ready.value;

    // An older epoch: refused before anything reaches the backend.
    expectStale(await refusedWith(client.freeBackend({ incarnation: inc, address, leaderEpoch: 4n }, { timeoutMs: 10_000 })), 4n, 5n);
    expect(await frees()).toBe(0);
    // Another address than the agent's record: INVALID_ARGUMENT naming the field, nothing freed.
    const wrong = await refusedWith(client.freeBackend({ incarnation: inc, address: "127.0.0.1:1", leaderEpoch: 5n }, { timeoutMs: 10_000 }));
    expect(wrong.code).toBe(Code.InvalidArgument);
    expect(wrong.details).toMatchObject({ field: "address" });
    expect(await frees()).toBe(0);

    // The current epoch: the agent calls the backend's Free once; the process runs on.
    const freed = await client.freeBackend({ incarnation: inc, address, leaderEpoch: 5n, requestedBy: "alice" }, { timeoutMs: 20_000 });
    expect(freed.outcome.case).toBe("freed");
    expect(await frees()).toBe(1);
    expect(await pidAlive(pid)).toBe(true);

    // An incarnation it does not run: nothing to free. A newer epoch raises the fence, as any command's does.
    const unknown = await client.freeBackend({ incarnation: newIncarnation(), address, leaderEpoch: 6n }, { timeoutMs: 10_000 });
    expect(unknown.outcome.case).toBe("alreadyGone");
    expect((await inventory(client)).leaderEpoch).toBe(6n);
    expectStale(await refusedWith(client.freeBackend({ incarnation: inc, address, leaderEpoch: 5n }, { timeoutMs: 10_000 })), 5n, 6n);
    expect(await frees()).toBe(1);

    expect((await client.stopBackend({ address, incarnation: inc, force: true, reason: "done", leaderEpoch: 6n }, { timeoutMs: 30_000 })).outcome.case).toBe("stopped");
    client.close();
    await proc.terminate();
  });
});
