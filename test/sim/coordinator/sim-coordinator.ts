import { create } from "@bufbuild/protobuf";
import { JournalRepairedSchema, type Event } from "@warden/proto";
import { Code, WardenError, createUlidFactory, nullLogger, sleep, wardenVersion } from "@warden/common";
import { Loader, type BackendConnector, type LoaderEvent, type StopRequest } from "@warden/loader";
import { createOutbox, type Outbox } from "@warden/outbox";
import { NodeTable, PlacementView, type HeartbeatAnswer } from "@warden/cluster";
import { EventHub } from "../../../services/coordinator/src/admin/event-hub.js";
import { PrefixRouting } from "../../../services/coordinator/src/routing/prefix-routing.js";
import { nodeEventInit, openIntentsOn, orphanStopInit, orphansAdoptedInit, reapGoneIntents, unreachabilityPausedInit } from "../../../services/coordinator/src/nodes/node-audit-events.js";
import { settleUnsettledEvictions } from "../../../services/coordinator/src/nodes/unsettled-evictions.js";
import { restoreJournalReplicas } from "../../../services/coordinator/src/nodes/journal-replicas-at-start.js";
import { startRecoveryWindow } from "../../../services/coordinator/src/nodes/recovery-window-at-start.js";
import { OutageServing } from "../../../services/coordinator/src/nodes/outage-serving.js";
import type { BackendClientHandle } from "../../../services/coordinator/src/routing/backend-connector.js";
import type { JournalFence } from "../world/sim-disk.js";
import type { SimPublishFence } from "../world/sim-jetstream.js";
import type { SimWorld, CoordinatorInbox } from "../world/sim-world.js";
import { simAgentConnector, type AgentLink, type SimClient } from "../world/sim-agent-connector.js";
import type { Registration } from "../world/sim-agent.js";
import { ScopedClock } from "./scoped-clock.js";

/** Probes in flight at once in the simulation: small, so a few unreachable instances already queue for their probes (production: 256). */
export const simMaxProbesInFlight = 2;

/** Hooks the harness gives the coordinator assembly (checkers and coverage watch through them). */
export interface CoordinatorHooks {
  onEvent(e: Event): void;
  /** A StopBackend left the coordinator; the returned function runs when its answer (or error) is in. */
  onStopSent(req: StopRequest, nodeId: string): () => void;
  onStartSent(nodeId: string, model: string, incarnation: string): void;
  /** The loader emitted `e`: called when the decision is taken, before the journal (the audit event comes later). */
  onLoaderEvent?(e: LoaderEvent): void;
  /** A heartbeat would skip its reconcile (NodeTableOptions.checkUnchanged): the hook runs `reconcile`, the full one, in its place. */
  checkUnchanged?(nodeId: string, reconcile: () => void): void;
}

/** The loader's local half of a simulated backend (routing only: Free goes through the agent, simAgentConnector). */
const simBackends: BackendConnector = { connect: () => ({ close: () => {} }) };

/** How long the coordinator's Health probe of a backend takes to answer in the simulation (fixed: it draws nothing). */
const probeRoundTripMs = 40;

/**
 * The local half with a Health client, for serving through an agent outage
 * (nodes/outage-serving.ts, the production wiring): the probe answers after
 * a fixed round trip when a live process runs at the address on its node and
 * the node's network is up both ways (a partition cuts the machine, not only
 * its agent); otherwise it fails. It draws nothing from the seed's streams.
 */
function probingBackends(w: SimWorld, clock: ScopedClock): BackendConnector<BackendClientHandle> {
  return {
    connect: (address, meta) => {
      const health = (_req: unknown, opts: { readonly signal?: AbortSignal }): Promise<unknown> =>
        new Promise((resolve, reject) => {
          clock.setTimer(probeRoundTripMs, () => {
            const nodeId = meta?.nodeId ?? "";
            const alive = [...w.truth.liveOn(nodeId)].some((p) => p.address === address && p.phase === "ready");
            if (opts.signal?.aborted === true) reject(new WardenError(Code.Canceled, "probe cancelled"));
            else if (alive && w.net.isUp(nodeId, "toAgent") && w.net.isUp(nodeId, "toCoordinator")) resolve({});
            else reject(new WardenError(Code.Unavailable, `no backend answers at ${address}`));
          });
        });
      return { close: () => {}, client: { health } } as unknown as BackendClientHandle;
    },
  };
}

/**
 * A generation of an HA coordinator process (the HA profile): it journals to
 * the shared stream, stamps every command with the lease's epoch, stops when
 * its process is stopped, and has its own links to the agents.
 */
export interface SimCoordinatorHa {
  /** The epoch this generation's term won (ground truth; heartbeat answers carry it). */
  readonly epoch: bigint;
  /**
   * The runner's `leaderEpoch` (ha-runner.ts): the term's epoch while the lease
   * is held under it by the core's `isLeaderAt` on the process's own clock;
   * otherwise it throws UNAVAILABLE "not the leader", so nothing is stamped.
   */
  readonly leaderEpoch: () => bigint;
  /** The runner's gate for timer-driven decisions and publishing: the lease of this term held at this moment. */
  readonly mayAct: () => boolean;
  /** The journal's epoch fence (the runner's `writerEpoch` and `onSuperseded`). */
  readonly journalFence: JournalFence;
  /** The process is SIGSTOPped until then (its timers and deliveries wait). */
  readonly pausedUntil: () => number;
  readonly link: AgentLink & { cutFrom(nodeId: string): boolean };
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
  /** Route hints of calls to models with `routing: prefix` (step-runner.ts). */
  prefix!: PrefixRouting;
  nodes!: NodeTable<SimClient>;
  outbox!: Outbox;
  hub!: EventHub;
  placement!: PlacementView;
  /** Serving through an agent outage (undefined when the seed runs without it: `SimOptions.outageServing: false`); at most `simMaxProbesInFlight` probes at once, so the queue of due probes is exercised. */
  outage: OutageServing | undefined;

  constructor(
    private readonly w: SimWorld,
    readonly generation: number,
    private readonly hooks: CoordinatorHooks,
    private readonly ha?: SimCoordinatorHa,
  ) {
    this.clock = new ScopedClock(w.clock, ha?.pausedUntil);
  }

  async start(tornRecords: number): Promise<void> {
    const w = this.w;
    const clock = this.clock;
    const rng = w.rng.fork(`coordinator-${String(this.generation)}`);
    const minted = createUlidFactory(clock, rng);
    const newId = (): string => minted();
    const outbox = createOutbox({ journal: this.ha === undefined ? w.disk.journal(clock) : w.disk.sharedJournal(clock, { generation: this.generation, epoch: this.ha.epoch }, w.opts.ha?.world?.journalResends !== false, this.ha.journalFence), publisher: w.nats.publisher(() => clock.alive(), this.ha?.epoch, this.publishFence()), clock, rng, newId, ...(this.ha === undefined ? {} : { mayPublish: this.ha.mayAct, leaderEpoch: this.ha.epoch }) });
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
    // The production wiring, on this generation's clock (its timer dies with a crash).
    const outage = w.opts.outageServing === false ? undefined : new OutageServing({ clock, log: nullLogger, probeIntervalMs: 1_000, probeTimeoutMs: 1_000, maxProbesInFlight: simMaxProbesInFlight });
    this.outage = outage;
    const nodes = new NodeTable<SimClient>({
      clock,
      connector: simAgentConnector(w, clock, this.hooks, this.ha?.leaderEpoch, this.ha?.link),
      graceMs: w.opts.nodeGraceMs,
      lostAfterMs: w.opts.nodeLostAfterMs,
      orphanGraceMs: w.opts.orphanGraceMs,
      version: wardenVersion,
      openIntentsOn: (nodeId) => openIntentsOn(outbox, nodeId),
      skipUnchangedReconcile: w.opts.unchangedHeartbeats !== "full",
      ...(w.opts.unchangedHeartbeats === "skip" || w.opts.unchangedHeartbeats === "full"
        ? {}
        : {
            checkUnchanged: (nodeId: string, reconcile: () => void) => {
              if (this.hooks.checkUnchanged === undefined) reconcile();
              else this.hooks.checkUnchanged(nodeId, reconcile);
            },
          }),
      onIntentsGone: (nodeId, gone) => {
        reapGoneIntents(outbox, hub, nodeId, gone);
      },
      onOrphansAdopted: (nodeId, adopted) => {
        const init = orphansAdoptedInit(nodeId, adopted);
        if (init !== undefined) void hub.publish(init);
      },
      onOrphan: (nodeId, o, kind, detail) => {
        void hub.publish(orphanStopInit(nodeId, o, kind, detail));
      },
      onPauseChange: (paused, unreachable, total) => {
        void hub.publish(unreachabilityPausedInit(paused, unreachable, total));
      },
      onNodeEvent: (nodeId, kind, labels, reason = "") => {
        outage?.nodeEvent(nodeId, kind);
        const init = nodeEventInit(nodeId, kind, labels, reason);
        if (init !== undefined) void hub.publish(init);
      },
    });
    this.nodes = nodes;
    const placement = new PlacementView(nodes, "binpack");
    this.placement = placement;
    // Remote agents may have backends running: always gate admission by the recovery window
    // (HA: opened by startRecoveryWindow below, as startCoordinator does; a single coordinator keeps its fixed timer).
    let openGate = (): void => {};
    const admissionGate = new Promise<void>((resolveGate) => {
      if (this.ha === undefined) clock.setTimer(w.opts.recoveryWindowMs, resolveGate);
      else openGate = resolveGate;
    });
    const loader = new Loader({
      admissionGate,
      clock,
      rng,
      sleep: (ms, signal) => sleep(clock, ms, signal),
      agents: outage === undefined ? nodes : outage.directory(nodes),
      backends: outage === undefined ? simBackends : probingBackends(w, clock),
      ...(this.ha === undefined ? {} : { mayAct: this.ha.mayAct }),
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
    this.loader = loader;
    // Prefix-affinity routing, the production module (its index dropped on each replica's stop, as in coordinator.ts).
    this.prefix = new PrefixRouting(loader, clock).follow(hub);
    // HA generations are wired as startCoordinator is today: unsettled evictions become stop intents,
    // and the journal's live instances count as unconfirmed replicas until their node reports.
    // (A single coordinator keeps the wiring its recorded seeds ran with.)
    const intentsAtStart = this.ha === undefined ? recovery.openStopIntents : await settleUnsettledEvictions(outbox, hub, recovery.unsettledEvictions);
    const openIntents = new Set(intentsAtStart.map((i) => i.incarnation));
    nodes.attach(loader, (inc) => openIntents.has(inc) || outbox.hasStopIntent(inc));
    placement.attach(loader);
    outage?.attach(loader as unknown as Loader<BackendClientHandle>);
    loader.restoreStopIntents(intentsAtStart);
    if (this.ha !== undefined) {
      restoreJournalReplicas(loader, recovery.recovered, { clock, log: nullLogger, lostAfterMs: w.opts.nodeLostAfterMs });
      startRecoveryWindow({ loader, clock, log: nullLogger, windowMs: w.opts.recoveryWindowMs, journaledNodes: [...recovery.recovered, ...intentsAtStart].map((r) => r.nodeId), open: openGate });
    }
    loader.startTicking();
    const healthLoop = (): void => {
      // HA: a member resumed after a pause past its lease marks nothing (coordinator.ts).
      if (this.ha?.mayAct() !== false) nodes.checkHealth();
      clock.setTimer(1_000, healthLoop);
    };
    clock.setTimer(1_000, healthLoop);
  }

  register(reg: Registration): void {
    if (!this.clock.alive()) return;
    this.nodes.register({ nodeId: reg.nodeId, address: reg.address, labels: reg.labels, gpus: [], bootEpoch: reg.bootEpoch, embedded: reg.embedded, version: wardenVersion, backends: reg.backends, ...(reg.limits === undefined ? {} : { limits: reg.limits }) });
  }

  /** HA: the runner's audit fence (coordinator-ha-wiring.ts auditFenceOf), flushes on this process's clock. */
  private publishFence(): SimPublishFence | undefined {
    const ha = this.ha;
    if (ha === undefined) return undefined;
    return {
      writerEpoch: () => (ha.mayAct() ? ha.epoch : undefined),
      flush: (delayMs, fn) => {
        this.clock.setTimer(delayMs, fn);
      },
    };
  }

  leaderEpoch(): bigint {
    return this.ha?.epoch ?? 0n;
  }

  accepts(nodeId: string): boolean {
    return this.ha === undefined || (!this.clock.paused() && !this.ha.link.cutFrom(nodeId));
  }

  heartbeat(hb: Parameters<NodeTable<SimClient>["heartbeat"]>[0]): HeartbeatAnswer {
    if (!this.clock.alive()) return "ok";
    return this.nodes.receive(hb);
  }

  crash(): void {
    // kill -9: no cleanup runs; timers die with the generation, answers to it are dropped.
    this.clock.kill();
  }
}
