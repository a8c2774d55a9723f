import { OutageProbes, type DueProbe, type NodeEventKind, type OutageProbeState } from "@warden/cluster";
import { WardenError, type Cancel, type Clock, type Logger } from "@warden/common";
import type { AgentDirectory, Loader } from "@warden/loader";
import type { BackendClientHandle } from "../routing/backend-connector.js";

export interface OutageServingOptions {
  readonly clock: Clock;
  readonly log: Logger;
  /** Time between two probes of one instance. @default 1000 */
  readonly probeIntervalMs?: number;
  /** Deadline of one probe (the backend's Health RPC). @default 1000 */
  readonly probeTimeoutMs?: number;
  /** Probes in flight at once and started per tick (a quarter of `probeIntervalMs`, at least 50 ms), 1 … 4 096; the rest wait their turn (in due order). @default 256 */
  readonly maxProbesInFlight?: number;
}

/** The most probes one coordinator sends at once by default: a mass outage (a rack's switch, a stalled coordinator) marks thousands of nodes unreachable in one check. */
export const defaultMaxProbesInFlight = 256;

/**
 * Serving through an agent outage, wired: the pure OutageProbes
 * (@warden/cluster) told of node health changes, its probes sent as the
 * backend's Health RPC over the client routing uses, and its word given to
 * the loader (AgentDirectory.servesDuringOutage) and the listings. While a
 * node is unreachable the watchdog's idle, busy and memory evictions there
 * are held (a stop needs the agent). The timer runs only while some
 * instance is probed. At most `maxProbesInFlight` probes run at once, and
 * new ones start only on ticks (four per interval), so when thousands of
 * nodes turn unreachable together the probes queue (in due order, O(1)
 * each) at a bounded rate — 1 024 a second by default — instead of opening
 * 100 000 calls in one turn, or keeping a core busy probing while the
 * coordinator is already short of CPU. Each probe has its own abort
 * controller: one shared signal would collect a listener per probe, and
 * node's EventTarget checks every listener on each add (quadratic: 10 000
 * nodes × 10 instances froze a coordinator for minutes).
 */
export class OutageServing {
  readonly probes: OutageProbes;
  private loader: Loader<BackendClientHandle> | undefined;
  private timer: Cancel | undefined;
  /** The probes in flight, each with its own controller (aborted by `close`). */
  private readonly inFlight = new Set<AbortController>();
  private closed = false;
  private readonly tickMs: number;
  private readonly probeTimeoutMs: number;
  private readonly maxInFlight: number;

  constructor(private readonly o: OutageServingOptions) {
    this.probes = new OutageProbes({ intervalMs: o.probeIntervalMs ?? 1000 });
    // A few ticks per interval: a probe due between two ticks waits a quarter interval at most.
    this.tickMs = Math.max(50, Math.floor(this.probes.intervalMs / 4));
    this.probeTimeoutMs = o.probeTimeoutMs ?? 1000;
    this.maxInFlight = Math.min(4096, Math.max(1, Math.floor(o.maxProbesInFlight ?? defaultMaxProbesInFlight)));
  }

  /** Probes in flight now (at most `maxProbesInFlight`). */
  get probesInFlight(): number {
    return this.inFlight.size;
  }

  /** The loader's directory: `nodes` with the probes' word on instances of unreachable nodes. */
  directory(nodes: AgentDirectory): AgentDirectory {
    return {
      agent: (nodeId) => nodes.agent(nodeId),
      isLocal: (nodeId) => nodes.isLocal(nodeId),
      ...(nodes.isReachable === undefined ? {} : { isReachable: (nodeId: string) => nodes.isReachable?.(nodeId) ?? true }),
      servesDuringOutage: (incarnation) => this.probes.routable(incarnation),
      ...(nodes.bundleStale === undefined ? {} : { bundleStale: (nodeId: string, incarnation: string, backend: string) => nodes.bundleStale?.(nodeId, incarnation, backend) === true }),
    };
  }

  attach(loader: Loader<BackendClientHandle>): void {
    this.loader = loader;
  }

  /** A node health change (NodeTable's onNodeEvent). */
  nodeEvent(nodeId: string, kind: NodeEventKind): void {
    const loader = this.loader;
    if (loader === undefined) return;
    if (kind === "unreachable") {
      // Ready instances only: one loading or stopping needs its agent to go on.
      const ready = loader.heldOn(nodeId).filter((h) => h.phase === "ready" && h.address !== undefined && loader.core.stateOf(h.incarnation) === "ready");
      this.probes.nodeUnreachable(
        nodeId,
        ready.map((h) => h.incarnation),
        this.o.clock.now(),
      );
      loader.holdEvictionsOn(nodeId, true);
      if (ready.length > 0) this.o.log.warn("node unreachable: its ready instances serve on while the coordinator's health probe answers", { nodeId, instances: ready.length });
      this.arm();
      return;
    }
    // Back (heartbeats: the agent's inventory speaks again), re-registered, or lost (its instances become leftovers there).
    const ended = this.probes.nodeSettled(nodeId);
    loader.holdEvictionsOn(nodeId, false);
    if (ended.length > 0) this.o.log.info("node no longer unreachable: probes of its instances end", { nodeId, kind, instances: ended.length });
  }

  /** What the listings show: an instance's word while its node is unreachable, and how many serve on per node. */
  readonly view = {
    stateOf: (incarnation: string): OutageProbeState | undefined => this.probes.stateOf(incarnation),
    servingOn: (nodeId: string): number => this.probes.servingOn(nodeId),
  };

  close(): void {
    this.closed = true;
    this.timer?.();
    this.timer = undefined;
    for (const ctl of this.inFlight) ctl.abort();
    this.inFlight.clear();
  }

  private arm(): void {
    if (this.timer !== undefined || this.closed || this.probes.size === 0) return;
    this.timer = this.o.clock.setTimer(this.tickMs, () => {
      this.timer = undefined;
      this.tick();
      this.arm();
    });
  }

  /** Starts due probes while there is room, on ticks only: at most `maxProbesInFlight` per tick, a bounded rate as well as a bounded number. */
  private tick(): void {
    if (this.closed) return;
    const room = this.maxInFlight - this.inFlight.size;
    if (room <= 0) return;
    for (const p of this.probes.takeDue(this.o.clock.now(), room)) void this.probe(p);
  }

  private async probe(p: DueProbe): Promise<void> {
    const backend = this.loader?.routingBackend(p.incarnation);
    if (backend === undefined) {
      // No longer held ready (stopped, removed, forgotten): nothing to route, nothing to probe.
      this.probes.forget(p.incarnation);
      return;
    }
    const ctl = new AbortController();
    this.inFlight.add(ctl);
    let failure: string | undefined;
    try {
      await backend.client.health({}, { signal: ctl.signal, timeoutMs: this.probeTimeoutMs });
    } catch (err) {
      failure = WardenError.from(err).message;
    } finally {
      this.inFlight.delete(ctl);
    }
    if (this.closed) return;
    const change = this.probes.probed(p, failure, this.o.clock.now());
    if (change?.t === "failed") this.o.log.warn("health probe failed on a node whose agent is unreachable: no call is routed to the instance", { nodeId: change.nodeId, incarnation: change.incarnation, error: change.reason });
    else if (change?.t === "recovered") this.o.log.info("health probe answers again: the instance serves on", { nodeId: change.nodeId, incarnation: change.incarnation });
  }
}
