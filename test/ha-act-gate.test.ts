/**
 * The HA action gate (`mayAct` of the coordinator's HA wiring) on a real
 * coordinator in process, real loopback gRPC, a file journal in place of the
 * JetStream one; the node is driven through NodeService by the test. While
 * the member does not hold the lease at the moment of acting — paused, or
 * resumed after a pause past its lease — its timers decide nothing: no node
 * marked unreachable, no idle eviction. Once it holds the lease again they act.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { Code, WardenError, createUlidFactory, cryptoRng, systemClock } from "@warden/common";
import { createClient, inProcessClient, type Client, type ServiceImpl } from "@warden/grpc";
import { openFileJournal } from "@warden/journal";
import { eventTypeOf } from "@warden/events";
import { AgentService, BackendState, NodeService } from "@warden/proto";
import { resolveCoordinatorConfig, startCoordinator, type Coordinator } from "@warden/coordinator";
import { agentPort } from "../services/coordinator/src/nodes/agent-port.js";
import { MemoryStateStore } from "../services/coordinator/src/ha/memory-state-store.fixture.js";
import { simModel, until } from "./support/coordinator-harness.js";

const dirs: string[] = [];
const running: { c: Coordinator; node: Client<typeof NodeService> }[] = [];
afterAll(async () => {
  for (const r of running) {
    r.node.close();
    await r.c.close({ stopBackends: false }).catch(() => undefined);
  }
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

const bootEpoch = 1_760_000_000_000n;
// Nothing listens on port 1: calls to this node or backend just fail.
const nowhere = "127.0.0.1:1";
const notLeader = (): WardenError => new WardenError(Code.Unavailable, "not the leader: lease lost, no quorum");
const sleepMs = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function start(lease: { held: boolean }): Promise<{ c: Coordinator; node: Client<typeof NodeService>; types: string[] }> {
  const stateDir = await mkdtemp(join(tmpdir(), "warden-ha-gate-"));
  dirs.push(stateDir);
  const config = resolveCoordinatorConfig({ listen: "127.0.0.1:0", stateDir, embeddedAgent: false, recoveryWindow: "300ms", nodeGrace: "1s", policy: { tickInterval: "100ms", idleCheck: true, idleTimeout: "1s" }, models: [simModel("m")] });
  const journal = await openFileJournal({ path: join(stateDir, "ha.journal") });
  const leaderEpoch = (): bigint => {
    if (!lease.held) throw notLeader();
    return 1n;
  };
  const c = await startCoordinator(config, { ha: { journal, state: new MemoryStateStore(), leaderEpoch, onSuperseded: () => undefined, mayAct: () => lease.held } });
  const types: string[] = [];
  c.hub.observe((e) => types.push(eventTypeOf(e)));
  const r = { c, node: createClient(NodeService, c.address) };
  running.push(r);
  return { ...r, types };
}

describe("HA: a member not holding the lease acts on no timer", () => {
  it("marks no node unreachable and evicts nothing idle while the lease is not held; both happen once it is held again", async () => {
    const lease = { held: true };
    const { c, node, types } = await start(lease);
    const inc = createUlidFactory(systemClock, cryptoRng)();
    await node.register({ nodeId: "a", address: nowhere, bootEpoch });
    const backends = [{ incarnation: inc, model: "m", address: "127.0.0.1:2", pid: 4242, state: BackendState.READY, backend: "backend-sim" }];
    let seq = 0n;
    const beat = (): Promise<unknown> => node.heartbeat({ nodeId: "a", bootEpoch, sequence: ++seq, orphans: [], backends });
    await beat();
    await until("m adopted on a", () => c.loader.knows(inc), 10_000);
    // The node keeps heartbeating; m goes idle. Not holding the lease: no tick evicts it.
    const beating = { on: true };
    const beats = (async () => {
      while (beating.on) {
        await beat().catch(() => undefined);
        await sleepMs(250);
      }
    })();
    lease.held = false;
    // The scenario needs the time to pass: many ticks (100 ms) beyond the idle timeout (1 s).
    await sleepMs(2_500);
    expect(types.filter((t) => t === "eviction.started")).toEqual([]);
    // Holding the lease again, the same tick evicts it: the gate, not chance, kept it.
    lease.held = true;
    await until("the idle m evicted", () => types.includes("eviction.started"), 15_000);
    beating.on = false;
    await beats;
    // The node falls silent while the lease is not held: no health check marks it.
    lease.held = false;
    await sleepMs(3_500);
    expect(c.nodes.get("a")?.state).toBe("ready");
    expect(types.filter((t) => t === "node.unreachable")).toEqual([]);
    lease.held = true;
    await until("a marked unreachable", () => c.nodes.get("a")?.state === "unreachable", 15_000);
  });

  it("a backend Free is an agent command: never sent while the lease is not held, stamped with the term's epoch when it is", async () => {
    const lease = { held: false };
    const sent: { incarnation: string; leaderEpoch: bigint }[] = [];
    const unused = (): never => {
      throw new WardenError(Code.Unimplemented, "not used");
    };
    const agent: ServiceImpl<typeof AgentService> = {
      startBackend: unused,
      stopBackend: unused,
      listBackends: unused,
      getNodeStatus: unused,
      watchBackends: unused,
      stopOrphan: unused,
      listBundles: unused,
      installBundle: unused,
      removeBundle: unused,
      getBackendLogs: unused,
      freeBackend: async (req) => {
        sent.push({ incarnation: req.incarnation, leaderEpoch: req.leaderEpoch });
        return { outcome: { case: "freed", value: { message: "" } } };
      },
    };
    const port = agentPort(inProcessClient(AgentService, agent), () => {
      if (!lease.held) throw notLeader();
      return 7n;
    });
    const incarnation = createUlidFactory(systemClock, cryptoRng)();
    const free = (): Promise<unknown> => port.freeBackend({ address: "127.0.0.1:2", incarnation }, { signal: new AbortController().signal, timeoutMs: 1_000 });
    const err = await free().then(() => undefined, (e: unknown) => e);
    expect(err instanceof WardenError && err.code === Code.Unavailable).toBe(true);
    expect(sent).toEqual([]);
    lease.held = true;
    expect(await free()).toEqual({ t: "freed" });
    // The agent judges the epoch against the newest it has seen (test/agent-fencing.test.ts).
    expect(sent).toEqual([{ incarnation, leaderEpoch: 7n }]);
  });
});
