import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { BackendState, InventoryEntrySchema } from "@warden/proto";
import { ManualClock, seededRng, sleep } from "@warden/common";
import { Loader, modelSpec, type AgentPort, type LoaderEvent, type StartEvent } from "@warden/loader";
import type { AgentConnector } from "./agent-connector.js";
import { NodeTable } from "./node-table.js";

// A ready instance missing from two inventories in a row is gone — unless
// those inventories were taken before its process existed: a Heartbeat that
// timed out (5 s) and was overtaken by the next can land after the start's
// Ready. The start's Spawned says which reports predate it (agent.proto
// `Spawned.heartbeat_sequence`, the seed 97245 mechanism under a stall).

const bootEpoch = 7n;

function cluster(floorSequence: bigint | undefined) {
  const clock = new ManualClock();
  const events: LoaderEvent[] = [];
  const port: AgentPort = {
    async *startBackend(): AsyncIterable<StartEvent> {
      yield { t: "spawned", address: "h:1", pid: 11, gpu: undefined, ...(floorSequence === undefined ? {} : { reportFloor: { bootEpoch, sequence: floorSequence } }) };
      yield { t: "ready", address: "h:1", memoryBytes: 0 };
    },
    stopBackend: () => Promise.resolve({ t: "stopped" }),
    freeBackend: () => Promise.resolve({ t: "unsupported" }),
    isRunning: () => Promise.resolve(true),
  };
  const connector: AgentConnector<object> = {
    connect: () => ({}),
    agentPort: () => port,
    close: () => {},
    stopOrphan: () => Promise.resolve({ alreadyGone: true }),
    watchExits: () => {},
  };
  const nodes = new NodeTable<object>({ clock, connector, graceMs: 1_000_000, lostAfterMs: 1_000_000, orphanGraceMs: 1_000_000, onNodeEvent: () => {} });
  const loader = new Loader({
    clock,
    rng: seededRng(1),
    sleep: (ms, signal) => sleep(clock, ms, signal),
    agents: nodes,
    backends: { connect: () => ({ free: async () => {}, close: () => {} }) },
    journal: { recordStopIntent: async () => {}, clearStopIntent: async () => {} },
    events: {
      emit: (e) => events.push(e),
      emitDurable: async (e) => {
        events.push(e);
      },
    },
    placement: { choose: () => ({ nodeId: "a", reason: "the only node" }) },
    inventories: nodes,
    mintIncarnation: () => "01JXT21ZN52BD4Z6YZPNZWTQRM",
    models: [modelSpec({ id: "m", backend: "sim" })],
  });
  nodes.attach(loader, () => false);
  nodes.register({ nodeId: "a", address: "h:0", labels: {}, gpus: [], bootEpoch });
  const beat = (sequence: bigint, listed: boolean): void => {
    const backends = listed ? [create(InventoryEntrySchema, { incarnation: "01JXT21ZN52BD4Z6YZPNZWTQRM", model: "m", address: "h:1", state: BackendState.READY })] : [];
    expect(nodes.heartbeat({ nodeId: "a", bootEpoch, sequence, backends, orphans: [], resources: undefined })).toBe(true);
  };
  const held = (): boolean => loader.heldInstances().some((h) => h.incarnation === "01JXT21ZN52BD4Z6YZPNZWTQRM");
  return { loader, beat, held, events };
}

describe("inventories taken before a start", () => {
  it("do not count as the instance vanishing; two later ones in a row still do", async () => {
    const c = cluster(5n);
    c.beat(3n, false);
    const lease = await c.loader.acquire("m", new AbortController().signal);
    lease.complete();
    expect(c.held()).toBe(true);
    // Reports 4 and 5 were stamped before the process entered the agent's table.
    c.beat(4n, false);
    c.beat(5n, false);
    expect(c.held()).toBe(true);
    expect(c.events.filter((e) => e.type === "backend.exited")).toEqual([]);
    // 6 and 7 were taken after: the process really is gone.
    c.beat(6n, false);
    expect(c.held()).toBe(true);
    c.beat(7n, false);
    expect(c.held()).toBe(false);
  });

  it("without a floor (an older agent), two in a row end it as before", async () => {
    const c = cluster(undefined);
    c.beat(3n, false);
    (await c.loader.acquire("m", new AbortController().signal)).complete();
    c.beat(4n, false);
    expect(c.held()).toBe(true);
    c.beat(5n, false);
    expect(c.held()).toBe(false);
  });
});
