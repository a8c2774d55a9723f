/**
 * One side of the HA eviction bench: a coordinator (in the bench process)
 * without an embedded agent, one agent process registered with it, and
 * `modelCount` backend-sim models. With `ha` the coordinator's journal is the
 * JetStream journal (replicas 3) wrapped to time each stop-intent append;
 * without it, the single-machine default (the file journal in its state dir).
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { createClient, type Client } from "@warden/grpc";
import type { Journal, JournalRecord } from "@warden/outbox";
import { AdminService, NodeState, UnloadOutcome } from "@warden/proto";
import { resolveCoordinatorConfig, startCoordinator, type Coordinator } from "@warden/coordinator";
import { openJetStreamJournal, type JetStreamJournal } from "../../services/coordinator/src/ha/jetstream-journal.js";
import { openKvStateStore } from "../../services/coordinator/src/ha/kv-state-store.js";
import { startRemoteAgent, type RemoteAgent } from "../support/agent-process.js";
import { simModel } from "../support/coordinator-harness.js";

export interface EvictionSide {
  readonly label: string;
  readonly models: readonly string[];
  /** Loads every model (concurrently; LoadModel answers once the backend is ready). */
  loadAll(): Promise<void>;
  /** UnloadModel(model) round trip in ms; throws unless the outcome is STOPPED. */
  evict(model: string): Promise<number>;
  /** Stop-intent append latencies (ms) seen so far: HA side only (the file journal is not wrapped). */
  readonly intentAckMs: readonly number[];
  close(): Promise<void>;
}

/** Times the stop-intent appends of the eviction path (the ack the stop waits for). */
function timedJournal(inner: Journal, sink: number[]): Journal {
  return {
    async append(record: JournalRecord, signal?: AbortSignal) {
      const t = performance.now();
      await inner.append(record, signal);
      if (record.kind === "stop-intent") sink.push(performance.now() - t);
    },
    replay: (signal) => inner.replay(signal),
  };
}

export async function startEvictionSide(o: { readonly label: string; readonly tag: string; readonly modelCount: number; readonly nc?: NatsConnection }): Promise<EvictionSide> {
  const dir = await mkdtemp(join(tmpdir(), `warden-bench-ha-eviction-${o.label}-`));
  const models = Array.from({ length: o.modelCount }, (_, i) => `m${String(i)}`);
  const config = resolveCoordinatorConfig({
    listen: "127.0.0.1:0",
    stateDir: join(dir, "state"),
    embeddedAgent: false,
    recoveryWindow: "500ms",
    models: models.map((id) => simModel(id)),
  });
  const intentAckMs: number[] = [];
  let js: JetStreamJournal | undefined;
  let c: Coordinator;
  if (o.nc === undefined) {
    c = await startCoordinator(config);
  } else {
    js = await openJetStreamJournal(o.nc, { replicas: 3 });
    const state = await openKvStateStore(o.nc, { replicas: 3 });
    c = await startCoordinator(config, { ha: { journal: timedJournal(js, intentAckMs), state, leaderEpoch: () => 1n, onSuperseded: () => undefined } });
  }
  let agent: RemoteAgent | undefined;
  let admin: Client<typeof AdminService> | undefined;
  const close = async (): Promise<void> => {
    admin?.close();
    await agent?.cleanup();
    await c.close({ stopBackends: false });
    js?.close();
    await rm(dir, { recursive: true, force: true });
  };
  try {
    agent = await startRemoteAgent({ coordinator: c.address, nodeId: `bench-${o.label}`, tag: o.tag, config: { heartbeatInterval: "1s" } });
    const a = createClient(AdminService, c.address);
    admin = a;
    const deadline = performance.now() + 60_000;
    while (!(await a.listNodes({})).nodes.some((n) => n.state === NodeState.READY)) {
      if (performance.now() > deadline) throw new Error(`${o.label}: agent not ready after 60 s`);
      await new Promise((r) => setTimeout(r, 100));
    }
    return {
      label: o.label,
      models,
      intentAckMs,
      async loadAll() {
        await Promise.all(models.map((model) => a.loadModel({ model }, { timeoutMs: 120_000 })));
      },
      async evict(model) {
        const t = performance.now();
        const r = await a.unloadModel({ model }, { timeoutMs: 60_000 });
        const ms = performance.now() - t;
        if (r.outcome !== UnloadOutcome.STOPPED) throw new Error(`${o.label}: unload of ${model} ended ${UnloadOutcome[r.outcome]} ${r.error}`);
        return ms;
      },
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
