import type { FencedCommand } from "../../../services/agent/src/leader-fence.js";
import type { BackendExit, HeartbeatAnswer, HeartbeatReport } from "@warden/cluster";
import type { InventoryEntry } from "@warden/proto";
import { EventQueue } from "../kernel/event-queue.js";
import { SimRandom } from "../kernel/sim-random.js";
import { VirtualClock } from "../kernel/virtual-clock.js";
import { Coverage } from "../check/coverage.js";
import type { SimOptions } from "../run/sim-options.js";
import { GroundTruth, type BackendBehaviour } from "./ground-truth.js";
import { SimAgent, type Registration } from "./sim-agent.js";
import { SimDisk } from "./sim-disk.js";
import { SimJetStream } from "./sim-jetstream.js";
import { SimNetwork } from "./sim-network.js";

/** What a coordinator generation exposes to the network (its NodeService). */
export interface CoordinatorInbox {
  register(reg: Registration): void;
  /** "register": unknown node, the agent must register again; "send-full": its delta was not applied. */
  heartbeat(hb: HeartbeatReport): HeartbeatAnswer;
  /** HA profile: false while this coordinator process is stopped or cut off from `nodeId` (the message is lost). */
  accepts?(nodeId: string): boolean;
  /** HA profile: the epoch this generation leads with, carried by its heartbeat answers (HeartbeatResponse.leader_epoch). */
  leaderEpoch?(): bigint;
}

/** What an agent's leader fence decided about one command (HA checkers' ground truth). */
export interface FenceDecision {
  readonly nodeId: string;
  readonly kind: FencedCommand;
  readonly epoch: bigint;
  /** The agent's fence before the command. */
  readonly newestBefore: bigint;
  readonly accepted: boolean;
  readonly incarnation: string;
}

interface ExitWatch {
  readonly signal: AbortSignal;
  readonly onExit: (incarnation: string, exit: BackendExit) => void;
  readonly alive: () => boolean;
}

/**
 * Everything outside the coordinator: clock and event queue, the PRNG, the
 * ground truth, the network, agents, NATS and the disk. Survives coordinator
 * crashes; the coordinator generation currently up is `inbox`.
 */
export class SimWorld {
  readonly queue = new EventQueue();
  readonly clock = new VirtualClock(this.queue);
  readonly rng: SimRandom;
  readonly coverage = new Coverage();
  readonly truth = new GroundTruth();
  readonly net: SimNetwork;
  readonly agents = new Map<string, SimAgent>();
  readonly disk: SimDisk;
  readonly nats: SimJetStream;
  readonly exitWatchers = new Map<string, ExitWatch>();
  inbox: CoordinatorInbox | undefined;
  /**
   * The whole inventory each heartbeat stands for (a delta's too: what the
   * agent read for it): the checkers' view of what the agent reported.
   */
  readonly inventoryOf = new WeakMap<HeartbeatReport, InventoryEntry[]>();
  /** Old heartbeats kept for the stale-inventory fault. */
  readonly oldHeartbeats = new Map<string, HeartbeatReport[]>();
  /** Per-model slow-backend windows (fault). */
  slowUntilMs = 0;
  /** Backend crash probability per start while the fault is on. */
  crashUntilMs = 0;
  readonly stall = { untilMs: 0 };
  /** A trace of what happened, hashed for the determinism check and printed on failure. */
  readonly trace: string[] = [];
  traceHash = 0x811c9dc5;
  keepTrace = false;
  /** HA profile: every command an agent's fence judged (see FenceDecision). */
  onFence: ((d: FenceDecision) => void) | undefined;
  /**
   * HA profile: from when each agent follows the leader up now (it finds a new
   * leader only after a while: until then its messages go to the old address
   * and are lost). Empty outside the profile.
   */
  readonly followFromMs = new Map<string, number>();
  /** HA profile: the newest leader epoch won so far (0n outside the profile). */
  epochInForce: () => bigint = () => 0n;
  /**
   * HA profile: a call that changes a backend (a start or stop an agent
   * applied, a Free the backend ran) sent by a generation whose epoch was no
   * longer the one in force when it sent it. The HA checkers report it.
   */
  onStaleEffect: ((what: string) => void) | undefined;

  /** HA profile: a command stamped with `epoch` is sent now by a generation that is not the leader of the epoch in force. */
  staleSender(epoch: bigint): boolean {
    return epoch > 0n && epoch < this.epochInForce();
  }

  constructor(readonly opts: SimOptions) {
    this.rng = new SimRandom(opts.seed).fork("world");
    this.net = new SimNetwork(this.queue, this.clock, this.rng.fork("net"), opts.link, this.coverage);
    this.disk = new SimDisk(this.rng.fork("disk"), () => 1 + this.rng.next() * 5, this.coverage);
    this.nats = new SimJetStream(this.queue, this.clock, this.rng.fork("nats"), this.coverage, opts.natsDupWindowMs);
    for (const n of opts.nodes) this.agents.set(n.nodeId, new SimAgent(this, n.nodeId, n.labels, n.embedded, n.memoryTotalBytes));
  }

  log(line: string): void {
    const s = `${String(Math.round(this.clock.now()))} ${line}`;
    for (let i = 0; i < s.length; i++) {
      this.traceHash ^= s.charCodeAt(i);
      this.traceHash = Math.imul(this.traceHash, 0x01000193) >>> 0;
    }
    if (this.keepTrace) this.trace.push(s);
  }

  backendFor(model: string): { behaviour: BackendBehaviour; memoryBytes: number } {
    const now = this.clock.now();
    const r = this.rng;
    const spec = this.opts.models.find((m) => m.id === model);
    const slow = now < this.slowUntilMs;
    const behaviour: BackendBehaviour = {
      loadMs: slow ? r.int(10_000, 60_000) : r.int(200, 4_000),
      hangs: slow && r.chance(0.3),
      failsLoad: r.chance(0.03),
      ignoresSigterm: r.chance(0.15),
      crashAfterMs: now < this.crashUntilMs && r.chance(0.5) ? r.int(1_000, 120_000) : undefined,
      slowFactor: slow ? 20 : 1,
    };
    const size = spec?.sizeBytes ?? 0;
    return { behaviour, memoryBytes: size > 0 ? Math.round(size * (0.8 + r.next() * 0.3)) : r.int(1, 4) * 1024 ** 3 };
  }

  /**
   * Agent→coordinator messages travel on a connection to one coordinator
   * process: one sent to a generation that crashed (or while none was up) is
   * lost with that connection, never handed to its successor.
   */
  private toCurrent(deliver: (inbox: CoordinatorInbox) => void, nodeId?: string): () => void {
    const to = this.inbox;
    // HA: an agent that has not found the new leader yet sends to the old one's address (lost).
    if (nodeId !== undefined && this.followFromMs.size > 0 && (this.followFromMs.get(nodeId) ?? 0) > this.clock.now()) return () => {};
    return () => {
      if (to !== undefined && this.inbox === to && (nodeId === undefined || to.accepts?.(nodeId) !== false)) deliver(to);
    };
  }

  sendRegister(agent: SimAgent, reg: Registration): void {
    this.net.send(agent.nodeId, "toCoordinator", "register", this.toCurrent((inbox) => { inbox.register(reg); }, agent.nodeId), agent.embedded);
  }

  /** Sends `hb`; `onReply` runs on the agent when the coordinator's answer arrives (never if either leg is lost). */
  sendHeartbeat(agent: SimAgent, hb: HeartbeatReport, onReply: (answer: HeartbeatAnswer) => void): void {
    let kept = this.oldHeartbeats.get(agent.nodeId);
    if (kept === undefined) {
      kept = [];
      this.oldHeartbeats.set(agent.nodeId, kept);
    }
    kept.push(hb);
    if (kept.length > 8) kept.shift();
    this.sentTo.set(hb, this.inbox);
    this.net.send(agent.nodeId, "toCoordinator", "heartbeat", this.toCurrent(() => { this.deliverHeartbeat(agent, hb, onReply); }, agent.nodeId), agent.embedded);
  }

  /** Which coordinator generation each kept heartbeat was sent to. */
  private readonly sentTo = new WeakMap<HeartbeatReport, CoordinatorInbox | undefined>();

  /**
   * The oldest kept heartbeat of `nodeId` sent to the generation up now (fault:
   * a stale report, delayed or re-delivered on its connection); undefined if none.
   */
  staleHeartbeat(nodeId: string): HeartbeatReport | undefined {
    const inbox = this.inbox;
    if (inbox === undefined) return undefined;
    return this.oldHeartbeats.get(nodeId)?.find((hb) => this.sentTo.get(hb) === inbox);
  }

  /** Delivers `hb` again as a stale report (a no-op if the generation it was sent to is gone by then). */
  sendStaleHeartbeat(agent: SimAgent, hb: HeartbeatReport): void {
    this.net.send(agent.nodeId, "toCoordinator", "heartbeat.stale", this.toCurrent(() => { this.deliverHeartbeat(agent, hb); }, agent.nodeId), agent.embedded);
  }

  deliverHeartbeat(agent: SimAgent, hb: HeartbeatReport, onReply?: (answer: HeartbeatAnswer) => void): void {
    const inbox = this.inbox;
    if (inbox === undefined) return;
    // The answer carries the leader's epoch: the agent raises its fence on it, as the real one does.
    const epoch = inbox.leaderEpoch?.() ?? 0n;
    const answer = inbox.heartbeat(hb);
    if (answer === "register") {
      // HeartbeatResponse.register_required: the agent registers again (its current boot).
      this.net.send(agent.nodeId, "toAgent", "register-required", () => {
        if (agent.up) agent.raiseFence(epoch);
        if (agent.up) this.sendRegister(agent, agent.registration());
        // No base: the next heartbeat carries the whole inventory.
        onReply?.("register");
      }, agent.embedded);
    } else if (onReply !== undefined) {
      this.net.send(agent.nodeId, "toAgent", "heartbeat-reply", () => {
        if (agent.up) agent.raiseFence(epoch);
        onReply(answer);
      }, agent.embedded);
    }
  }

  /** The whole inventory `hb` stands for (its own backends when it is full). */
  reportedBackends(hb: HeartbeatReport): readonly InventoryEntry[] {
    return hb.delta === undefined ? hb.backends : (this.inventoryOf.get(hb) ?? hb.backends);
  }

  sendExit(agent: SimAgent, incarnation: string, exit: BackendExit): void {
    this.log(`exit ${agent.nodeId} ${incarnation} ${exit.signal}`);
    this.net.send(agent.nodeId, "toCoordinator", "exit", this.toCurrent(() => {
      const w = this.exitWatchers.get(agent.nodeId);
      if (w === undefined || w.signal.aborted || !w.alive()) return;
      w.onExit(incarnation, exit);
    }, agent.nodeId), agent.embedded);
  }
}
