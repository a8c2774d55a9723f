import { create } from "@bufbuild/protobuf";
import { NodeResourcesSchema, type NodeResources } from "@warden/proto";
import { Code, WardenError, sleep, type Clock } from "@warden/common";
import type { AgentDirectory, AgentPort, FreeAnswer, InventoryAnswer, InventoryPort, StartEvent, StartRequest, StopAnswer, StopRequest } from "@warden/loader";
import type { NodeLimits, PlacementNode, PlacementNodes } from "@warden/cluster";
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
 * holds its configured memory estimate; a stop takes `stopMs`. No faults —
 * a replay asks what the policy does, not whether Warden survives the
 * network (the seeded simulation, test/sim, does that).
 */
export class ReplayNode implements AgentPort, PlacementNode {
  readonly state = "ready" as const;
  readonly draining = false;
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
    private readonly stopMs: number,
    private readonly meter: ReplayMeter,
    private readonly onMemory: (nodeId: string, usedBytes: number) => void,
  ) {}

  get resources(): NodeResources {
    return create(NodeResourcesSchema, { ramTotalBytes: BigInt(this.totalBytes), ramUsedBytes: BigInt(this.usedBytes) });
  }

  private setUsed(delta: number): void {
    this.usedBytes += delta;
    this.meter.memory(this.nodeId, this.usedBytes, this.clock.now());
    this.onMemory(this.nodeId, this.usedBytes);
  }

  async *startBackend(request: StartRequest, options: { readonly signal: AbortSignal }): AsyncIterable<StartEvent> {
    const address = `${this.nodeId}:${String(this.nextPort++)}`;
    // The loader's memory estimate of the model: the config the replay runs under.
    const sizeBytes = this.meter.sizeOf(request.model);
    const p: SimProcess = { incarnation: request.incarnation, model: request.model, address, sizeBytes };
    this.procs.set(request.incarnation, p);
    this.setUsed(sizeBytes);
    this.meter.started(request.incarnation, request.model, this.clock.now());
    yield { t: "spawned", address, pid: this.nextPort, gpu: undefined };
    yield { t: "loading" };
    try {
      await sleep(this.clock, this.loadMsOf(request.model), options.signal);
    } catch (err) {
      this.gone(request.incarnation);
      throw err;
    }
    this.meter.ready(request.incarnation, this.clock.now());
    yield { t: "ready", address, memoryBytes: sizeBytes };
  }

  private gone(incarnation: string): boolean {
    const p = this.procs.get(incarnation);
    if (p === undefined) return false;
    this.procs.delete(incarnation);
    this.setUsed(-p.sizeBytes);
    this.meter.stopped(incarnation, this.clock.now());
    return true;
  }

  async stopBackend(request: StopRequest, options: { readonly signal: AbortSignal; readonly timeoutMs: number }): Promise<StopAnswer> {
    if (!this.procs.has(request.incarnation)) return { t: "alreadyGone", replacedBy: "" };
    await sleep(this.clock, request.force ? 0 : this.stopMs, options.signal);
    return this.gone(request.incarnation) ? { t: "stopped" } : { t: "alreadyGone", replacedBy: "" };
  }

  freeBackend(request: { readonly incarnation: string }): Promise<FreeAnswer> {
    return Promise.resolve(this.procs.has(request.incarnation) ? { t: "freed" } : { t: "alreadyGone" });
  }

  isRunning(incarnation: string): Promise<boolean> {
    return Promise.resolve(this.procs.has(incarnation));
  }
}

/** The replay's cluster as the loader and the placement view see it: every node ready, reachable, with empty inventories. */
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

  limitsOf(): NodeLimits {
    return {};
  }

  agent(nodeId: string): AgentPort | undefined {
    return this.nodes.get(nodeId);
  }

  isLocal(): boolean {
    return false;
  }

  isReachable(): boolean {
    return true;
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
