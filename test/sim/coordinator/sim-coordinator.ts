import { create } from "@bufbuild/protobuf";
import { EvictionFailedOutcome, EvictionReason, JournalRepairedSchema, type Event } from "@warden/proto";
import { Code, WardenError, createUlidFactory, nullLogger, sleep, wardenVersion } from "@warden/common";
import { Loader, type BackendHandle, type LoaderEvent, type StopRequest } from "@warden/loader";
import { createOutbox, type Outbox } from "@warden/outbox";
import { NodeTable, PlacementView } from "@warden/cluster";
import { EventHub } from "../../../services/coordinator/src/event-hub.js";
import type { SimWorld, CoordinatorInbox } from "../world/sim-world.js";
import { simAgentConnector, type SimClient } from "../world/sim-agent-connector.js";
import { ScopedClock } from "./scoped-clock.js";

/** Hooks the harness gives the coordinator assembly (checkers and coverage watch through them). */
export interface CoordinatorHooks {
  onEvent(e: Event): void;
  /** A StopBackend left the coordinator; the returned function runs when its answer (or error) is in. */
  onStopSent(req: StopRequest, nodeId: string): () => void;
  onStartSent(nodeId: string, model: string, incarnation: string): void;
  /** The loader emitted `e`: called when the decision is taken, before the journal (the audit event comes later). */
  onLoaderEvent?(e: LoaderEvent): void;
}

/** The loader's local half of a simulated backend: Free() answers after a few ms. */
function simBackends(clock: ScopedClock): { connect(address: string): BackendHandle } {
  return {
    connect: () => ({
      free: (o) => sleep(clock, 5, o.signal).then(() => {
        throw new WardenError(Code.Unimplemented, "Free not implemented");
      }),
      close: () => {},
    }),
  };
}

/**
 * One coordinator generation wired like `startCoordinator`
 * (services/coordinator/src/coordinator.ts): the outbox over the simulated
 * journal (replaying stop intents and unpublished events), the event hub, the
 * real NodeTable with the same callbacks as the NodeRegistry, the placement
 * view, the admission gate of the recovery window, the Loader, restored stop
 * intents, the periodic checkHealth and the watchdog tick. `crash()` kills
 * it: every timer it armed is cancelled and its answers are dropped.
 */
export class SimCoordinator implements CoordinatorInbox {
  readonly clock: ScopedClock;
  loader!: Loader;
  nodes!: NodeTable<SimClient>;
  outbox!: Outbox;
  hub!: EventHub;
  placement!: PlacementView;

  constructor(
    private readonly w: SimWorld,
    readonly generation: number,
    private readonly hooks: CoordinatorHooks,
  ) {
    this.clock = new ScopedClock(w.clock);
  }

  async start(tornRecords: number): Promise<void> {
    const w = this.w;
    const clock = this.clock;
    const rng = w.rng.fork(`coordinator-${String(this.generation)}`);
    const minted = createUlidFactory(clock, rng);
    const newId = (): string => minted();
    const outbox = createOutbox({ journal: w.disk.journal(clock), publisher: w.nats.publisher(() => clock.alive()), clock, rng, newId });
    this.outbox = outbox;
    const recovery = await outbox.start();
    const hub = new EventHub(outbox, nullLogger);
    this.hub = hub;
    hub.observe((e) => {
      this.hooks.onEvent(e);
    });
    for (const e of recovery.recovered) hub.deliver(e);
    if (tornRecords > 0) {
      void hub.publish({ payload: { case: "journalRepaired", value: create(JournalRepairedSchema, { path: "sim", droppedBytes: BigInt(tornRecords * 64), droppedRecords: tornRecords }) } });
    }
    const loaderRef: { current: Loader | undefined } = { current: undefined };
    const nodes = new NodeTable<SimClient>({
      clock,
      connector: simAgentConnector(w, clock, this.hooks),
      graceMs: w.opts.nodeGraceMs,
      lostAfterMs: w.opts.nodeLostAfterMs,
      orphanGraceMs: w.opts.orphanGraceMs,
      version: wardenVersion,
      onIntentsGone: (nodeId, present) => {
        for (const i of outbox.openStopIntents()) {
          if (i.nodeId !== nodeId || present.has(i.incarnation) || loaderRef.current?.knows(i.incarnation) === true) continue;
          void outbox.clearStopIntent(i.incarnation).catch(() => undefined);
          void hub.publish({ nodeId, model: i.model, address: i.address, incarnation: i.incarnation, payload: { case: "leftoverReaped", value: { $typeName: "warden.v1.LeftoverReaped", attempts: 0 } } });
        }
      },
      onOrphansAdopted: (nodeId, adopted) => {
        const [first] = adopted;
        if (first === undefined) return;
        void hub.publish({
          nodeId,
          model: first.model,
          address: first.address,
          incarnation: `pid:${String(first.pid)}`,
          payload: { case: "orphanAdopted", value: { $typeName: "warden.v1.OrphanAdopted", pid: first.pid, memoryBytes: first.memoryBytes, count: adopted.length, pids: adopted.slice(0, 8).map((o) => o.pid) } },
        });
      },
      onOrphan: (nodeId, o, kind, detail) => {
        const base = { nodeId, model: o.model, address: o.address, incarnation: `pid:${String(o.pid)}` };
        switch (kind) {
          case "stopping":
            void hub.publish({ ...base, payload: { case: "evictionStarted", value: { $typeName: "warden.v1.EvictionStarted", reason: EvictionReason.ORPHAN, trigger: "orphan grace", wasBusy: false, force: false, openRequestIds: [] } } });
            break;
          case "stopped":
            void hub.publish({ ...base, payload: { case: "evictionStopped", value: { $typeName: "warden.v1.EvictionStopped", reason: EvictionReason.ORPHAN, alreadyGone: detail !== "" } } });
            break;
          case "failed":
            void hub.publish({ ...base, payload: { case: "evictionFailed", value: { $typeName: "warden.v1.EvictionFailed", reason: EvictionReason.ORPHAN, error: detail, outcome: EvictionFailedOutcome.LEFTOVER, openRequestIds: [], terminalReason: "" } } });
            break;
        }
      },
      onPauseChange: (paused, unreachable, total) => {
        void hub.publish({ payload: { case: "unreachabilityPaused", value: { $typeName: "warden.v1.UnreachabilityPaused", paused, unreachableNodes: unreachable, totalNodes: total } } });
      },
      onNodeEvent: (nodeId, kind, labels, reason = "") => {
        switch (kind) {
          case "registered":
            void hub.publish({ nodeId, payload: { case: "nodeRegistered", value: { $typeName: "warden.v1.NodeRegistered", labels } } });
            break;
          case "unreachable":
            void hub.publish({ nodeId, payload: { case: "nodeUnreachable", value: { $typeName: "warden.v1.NodeUnreachable" } } });
            break;
          case "lost":
          case "lost-by-operator":
            void hub.publish({ nodeId, payload: { case: "nodeLost", value: { $typeName: "warden.v1.NodeLost", byOperator: kind === "lost-by-operator", reason } } });
            break;
          case "ready":
            break;
        }
      },
    });
    this.nodes = nodes;
    const placement = new PlacementView(nodes, "binpack");
    this.placement = placement;
    // Remote agents may have backends running: always gate admission by the recovery window.
    const admissionGate = new Promise<void>((resolveGate) => {
      clock.setTimer(w.opts.recoveryWindowMs, resolveGate);
    });
    const loader = new Loader({
      admissionGate,
      clock,
      rng,
      sleep: (ms, signal) => sleep(clock, ms, signal),
      agents: nodes,
      backends: simBackends(clock),
      journal: { recordStopIntent: (i) => outbox.recordStopIntent(i), clearStopIntent: (inc) => outbox.clearStopIntent(inc) },
      events: {
        emit: (e) => {
          this.hooks.onLoaderEvent?.(e);
          hub.emit(e);
        },
        emitDurable: (e) => {
          this.hooks.onLoaderEvent?.(e);
          return hub.emitDurable(e);
        },
      },
      placement,
      inventories: nodes,
      mintIncarnation: () => {
        const inc = newId();
        w.truth.minted.add(inc);
        return inc;
      },
      models: w.opts.models,
      policy: w.opts.policy,
      stop: { stopRpcTimeoutMs: w.opts.stopRpcTimeoutMs },
    });
    loaderRef.current = loader;
    this.loader = loader;
    const openIntents = new Set(recovery.openStopIntents.map((i) => i.incarnation));
    nodes.attach(loader, (inc) => openIntents.has(inc) || outbox.openStopIntents().some((i) => i.incarnation === inc));
    placement.attach(loader);
    loader.restoreStopIntents(recovery.openStopIntents);
    loader.startTicking();
    const healthLoop = (): void => {
      nodes.checkHealth();
      clock.setTimer(1_000, healthLoop);
    };
    clock.setTimer(1_000, healthLoop);
  }

  register(reg: { nodeId: string; address: string; labels: Record<string, string>; bootEpoch: bigint; embedded: boolean; backends: readonly string[] }): void {
    if (!this.clock.alive()) return;
    this.nodes.register({ nodeId: reg.nodeId, address: reg.address, labels: reg.labels, gpus: [], bootEpoch: reg.bootEpoch, embedded: reg.embedded, version: wardenVersion, backends: reg.backends });
  }

  heartbeat(hb: Parameters<NodeTable<SimClient>["heartbeat"]>[0]): boolean {
    if (!this.clock.alive()) return true;
    return this.nodes.heartbeat(hb);
  }

  crash(): void {
    // kill -9: no cleanup runs; timers die with the generation, answers to it are dropped.
    this.clock.kill();
  }
}
