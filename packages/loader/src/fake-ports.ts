import type { WardenError } from "@warden/common";
import type { LoaderEvent, LoaderEventSink, LoaderEventType } from "./loader-event.js";
import type { InventoryAnswer, InventoryPort, PlacementPort } from "./loader-types.js";
import type { ModelSpec } from "./model-spec.js";
import type { AgentDirectory, AgentPort, BackendConnector, BackendHandle, FreeAnswer, FreeRequest, StopIntent, StopIntentJournal } from "./ports.js";
import type { FakeAgent } from "./fake-agent.js";

export class FakeDirectory implements AgentDirectory {
  readonly agents = new Map<string, FakeAgent>();
  readonly local = new Set<string>();

  agent(nodeId: string): AgentPort | undefined {
    return this.agents.get(nodeId);
  }

  isLocal(nodeId: string): boolean {
    return this.local.has(nodeId);
  }

  /** Nodes a test declared unreachable (accounted, never routed to). */
  readonly unreachable = new Set<string>();

  isReachable(nodeId: string): boolean {
    return !this.unreachable.has(nodeId);
  }

  /** Instances of unreachable nodes a test says serve on (their probe answers). */
  readonly servingThroughOutage = new Set<string>();

  servesDuringOutage(incarnation: string): boolean {
    return this.servingThroughOutage.has(incarnation);
  }

  /** Instances a test says run a backend bundle their node no longer names (a rollout replaces them). */
  readonly oldBundle = new Set<string>();

  bundleStale(_nodeId: string, incarnation: string): boolean {
    return this.oldBundle.has(incarnation);
  }
}

/** The loader's client of one backend (routing only): records its close. */
export class FakeBackend implements BackendHandle {
  closed = false;

  constructor(readonly address: string) {}

  close(): void {
    this.closed = true;
  }
}

export class FakeConnector implements BackendConnector<FakeBackend> {
  readonly connected: FakeBackend[] = [];

  connect(address: string): FakeBackend {
    const b = new FakeBackend(address);
    this.connected.push(b);
    return b;
  }
}

/**
 * The Free calls agents sent to their backends (AgentPort.freeBackend),
 * shared by a harness's agents: each is logged `free <address>` and answered
 * by `script` (default: freed; a script resolving with undefined means freed).
 */
export class FakeFrees {
  readonly requests: FreeRequest[] = [];
  script: (request: FreeRequest) => Promise<FreeAnswer | undefined> = async () => ({ t: "freed" });

  constructor(private readonly log: string[]) {}

  async run(request: FreeRequest): Promise<FreeAnswer> {
    this.requests.push(request);
    this.log.push(`free ${request.address}`);
    return (await this.script(request)) ?? { t: "freed" };
  }

  /** Free calls for `address`, over every agent sharing this record. */
  callsAt(address: string): number {
    return this.requests.filter((r) => r.address === address).length;
  }
}

export class FakeJournal implements StopIntentJournal {
  readonly records: StopIntent[] = [];
  readonly clears: string[] = [];
  readonly open = new Map<string, StopIntent>();

  constructor(private readonly log: string[]) {}

  /** When set, recordStopIntent rejects with it (a journal that cannot fsync). */
  failRecord: WardenError | undefined;

  async recordStopIntent(intent: StopIntent): Promise<void> {
    if (this.failRecord !== undefined) {
      this.log.push(`intent.record-failed ${intent.incarnation}`);
      throw this.failRecord;
    }
    this.records.push(intent);
    this.open.set(intent.incarnation, intent);
    this.log.push(`intent.record ${intent.incarnation}`);
  }

  async clearStopIntent(incarnation: string): Promise<void> {
    this.clears.push(incarnation);
    this.open.delete(incarnation);
    this.log.push(`intent.clear ${incarnation}`);
  }
}

export class FakeEvents implements LoaderEventSink {
  readonly list: LoaderEvent[] = [];

  constructor(private readonly log: string[]) {}

  emit(event: LoaderEvent): void {
    this.list.push(event);
    this.log.push(`event ${event.type} ${event.incarnation}`);
  }

  /** When set, a durable emit resolves only when this promise does (a slow outbox). */
  durableGate: Promise<void> | undefined;
  readonly durablyWritten: LoaderEvent[] = [];

  /** Durable emit: recorded like `emit`; resolves at once unless `durableGate` is set. */
  async emitDurable(event: LoaderEvent): Promise<void> {
    this.emit(event);
    if (this.durableGate !== undefined) await this.durableGate;
    this.durablyWritten.push(event);
    this.log.push(`durable ${event.type} ${event.incarnation}`);
  }

  ofType<T extends LoaderEventType>(type: T): Extract<LoaderEvent, { type: T }>[] {
    return this.list.filter((e): e is Extract<LoaderEvent, { type: T }> => e.type === type);
  }

  types(): LoaderEventType[] {
    return this.list.map((e) => e.type);
  }
}

/** Places a model on `route[model]`, else on `defaultNode`. */
export class FakePlacement implements PlacementPort {
  readonly route = new Map<string, string>();
  defaultNode: string | undefined = "n1";
  /** With no node to place on: as when no node is ready (none registered, or all unreachable). */
  noReadyNode = false;
  readonly calls: string[] = [];
  /** Nodes registered that have not reported an inventory yet. */
  readonly awaiting = new Set<string>();

  awaitingInventory(nodeId: string): boolean {
    return this.awaiting.has(nodeId);
  }

  choose(spec: ModelSpec): { readonly nodeId: string } | { readonly nodeId: undefined; readonly reason: string; readonly transient?: true } {
    this.calls.push(spec.id);
    const nodeId = this.route.get(spec.id) ?? this.defaultNode;
    if (nodeId === undefined && this.noReadyNode) return { nodeId: undefined, reason: "no node is registered", transient: true };
    return nodeId === undefined ? { nodeId: undefined, reason: "no node fits" } : { nodeId };
  }
}

export class FakeInventory implements InventoryPort {
  readonly answers = new Map<string, InventoryAnswer>();
  readonly asked: string[] = [];

  findModel(model: string): InventoryAnswer {
    this.asked.push(model);
    return this.answers.get(model) ?? { t: "absent" };
  }
}

