import { create } from "@bufbuild/protobuf";
import { NodeResourcesSchema, type NodeResources } from "@warden/proto";
import { Code, WardenError, sleep, type Clock } from "@warden/common";
import type { AgentDirectory, AgentPort, FreeAnswer, InventoryAnswer, InventoryPort, StartEvent, StartRequest, StopAnswer, StopRequest } from "@warden/loader";
import type { NodeHealthState, NodeLimits, PlacementNode, PlacementNodes } from "@warden/cluster";
import type { ReplayMeter } from "./replay-meter.js";

/** One simulated backend process: loading until `readyAt`, then ready until stopped. */
interface SimProcess {
  readonly incarnation: string;
  readonly model: string;
  readonly address: string;
  readonly sizeBytes: number;
}

/**
 * The replay's agents: a start takes the model's recorded load time and
 * holds its configured memory estimate; a stop takes the model's recorded stop time. No faults of
 * their own — a replay asks what the policy does, not whether Warden
 * survives the network (the seeded simulation, test/sim, does that) — but a
 * node the trace recorded as lost loses everything it ran at that time, and
 * one it recorded as drained is drained.
 */
export class ReplayNode implements AgentPort, PlacementNode {
  /** From the trace's node lines: lost until it joined when its first line is a join. */
  state: NodeHealthState = "ready";
  draining = false;
  /** The operator's limits the trace recorded (admin limits lines). */
  limits: NodeLimits = {};
  readonly labels: Record<string, string> = {};
  readonly backends: ReadonlySet<string> = new Set();
  private readonly procs = new Map<string, SimProcess>();
  private usedBytes = 0;
  private nextPort = 20_000;

  constructor(
    readonly nodeId: string,
    readonly totalBytes: number,
    private readonly clock: Clock,
    private readonly loadMsOf: (model: string) => number,
    private readonly stopMsOf: (model: string) => number,
    private readonly meter: ReplayMeter,
    private readonly onMemory: (nodeId: string, usedBytes: number) => void,
  ) {}

  get resources(): NodeResources {
    return create(NodeResourcesSchema, { ramTotalBytes: BigInt(this.totalBytes), ramUsedBytes: BigInt(this.usedBytes) });
  }

  private setUsed(model: string, delta: number): void {
    this.usedBytes += delta;
    this.meter.memory(this.nodeId, model, delta, this.clock.now());
    this.onMemory(this.nodeId, this.usedBytes);
  }

  /** The node was lost: every process on it is gone at once (the loader is told by the replay). */
  lose(): void {
    this.state = "lost";
    for (const inc of [...this.procs.keys()]) this.gone(inc);
  }

  private down(): WardenError {
    return new WardenError(Code.Unavailable, `node "${this.nodeId}" is ${this.state}`);
  }

  async *startBackend(request: StartRequest, options: { readonly signal: AbortSignal }): AsyncIterable<StartEvent> {
    if (this.state !== "ready") throw this.down();
    const address = `${this.nodeId}:${String(this.nextPort++)}`;
    // The loader's memory estimate of the model: the config the replay runs under.
    const sizeBytes = this.meter.sizeOf(request.model);
    const p: SimProcess = { incarnation: request.incarnation, model: request.model, address, sizeBytes };
    this.procs.set(request.incarnation, p);
    this.setUsed(request.model, sizeBytes);
    this.meter.started(request.incarnation, request.model, this.clock.now());
    yield { t: "spawned", address, pid: this.nextPort, gpu: undefined };
    yield { t: "loading" };
    try {
      await sleep(this.clock, this.loadMsOf(request.model), options.signal);
    } catch (err) {
      this.gone(request.incarnation);
      throw err;
    }
    // Lost while loading: the process went with its node.
    if (!this.procs.has(request.incarnation)) throw this.down();
    this.meter.ready(request.incarnation, this.clock.now());
    yield { t: "ready", address, memoryBytes: sizeBytes };
  }

  private gone(incarnation: string): boolean {
    const p = this.procs.get(incarnation);
    if (p === undefined) return false;
    this.procs.delete(incarnation);
    this.setUsed(p.model, -p.sizeBytes);
    this.meter.stopped(incarnation, this.clock.now());
    return true;
  }

  async stopBackend(request: StopRequest, options: { readonly signal: AbortSignal; readonly timeoutMs: number }): Promise<StopAnswer> {
    const p = this.procs.get(request.incarnation);
    if (p === undefined) return { t: "alreadyGone", replacedBy: "" };
    if (this.state !== "ready") throw this.down();
    await sleep(this.clock, request.force ? 0 : this.stopMsOf(p.model), options.signal);
    return this.gone(request.incarnation) ? { t: "stopped" } : { t: "alreadyGone", replacedBy: "" };
  }

  freeBackend(request: { readonly incarnation: string }): Promise<FreeAnswer> {
    return Promise.resolve(this.procs.has(request.incarnation) ? { t: "freed" } : { t: "alreadyGone" });
  }

  isRunning(incarnation: string): Promise<boolean> {
    return Promise.resolve(this.procs.has(incarnation));
  }
}

/** The replay's cluster as the loader and the placement view see it: each node as the trace last recorded it, with empty inventories. */
export class ReplayCluster implements AgentDirectory, PlacementNodes, InventoryPort {
  readonly nodes = new Map<string, ReplayNode>();
  private readonly listed: ReplayNode[] = [];

  add(n: ReplayNode): void {
    this.nodes.set(n.nodeId, n);
    this.listed.push(n);
  }

  list(): readonly PlacementNode[] {
    return this.listed;
  }

  limitsOf(nodeId: string): NodeLimits {
    return this.nodes.get(nodeId)?.limits ?? {};
  }

  agent(nodeId: string): AgentPort | undefined {
    const n = this.nodes.get(nodeId);
    return n === undefined || n.state === "lost" ? undefined : n;
  }

  isLocal(): boolean {
    return false;
  }

  isReachable(nodeId: string): boolean {
    return this.nodes.get(nodeId)?.state === "ready";
  }

  /** Nothing runs that the loader did not start: no adoption in a replay. */
  findModel(): InventoryAnswer {
    return { t: "absent" };
  }
}

/** The backend connection a lease carries: a replay routes nowhere. */
export const replayBackends = {
  connect: (): { close(): void } => ({ close: () => {} }),
};

/** A call for a model the replayed config does not have. */
export function unknownModel(model: string): WardenError {
  return new WardenError(Code.NotFound, `model "${model}" is not in the replayed config`);
}
