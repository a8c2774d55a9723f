/**
 * Hand-written fakes of the loader's ports for unit tests. Each records what
 * happened (into its own arrays and into one shared, ordered `log`) and
 * answers with a scripted behaviour the test can change at any time. Not
 * exported from the package index.
 */
import { ManualClock, WardenError, abortReason, seededRng, sleep, type Code } from "@warden/common";
import type { PolicyPatch } from "@warden/watchdog";
import type { CooldownPolicy } from "./load-cooldown.js";
import type { LoaderEvent, LoaderEventSink, LoaderEventType } from "./loader-event.js";
import type { InventoryAnswer, InventoryPort, PlacementPort } from "./loader-types.js";
import { Loader, type StopTimings } from "./loader.js";
import { modelSpec, type ModelSpec } from "./model-spec.js";
import type {
  AgentDirectory,
  AgentPort,
  BackendConnector,
  BackendHandle,
  StartEvent,
  StartRequest,
  StopAnswer,
  StopIntent,
  StopIntentJournal,
  StopRequest,
} from "./ports.js";

/** Lets every pending promise chain run (one macrotask turn drains all microtasks). */
export async function flush(rounds = 2): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    // eslint-disable-next-line no-restricted-globals -- test helper only: yields to the event loop between ManualClock steps
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
}

/** A promise with its settle functions exposed. */
export interface Deferred<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
  reject(err: unknown): void;
}

export function deferred<T>(): Deferred<T> {
  let resolve: (value: T) => void = () => {};
  let reject: (err: unknown) => void = () => {};
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/**
 * One StartBackend stream, driven by the test (or by the agent's script).
 * Aborting the request's signal makes the stream throw the abort reason, as a
 * cancelled gRPC stream does.
 */
export class FakeStart implements AsyncIterable<StartEvent> {
  readonly sent: StartEvent[] = [];
  private readonly queue: StartEvent[] = [];
  private wake: (() => void) | undefined;
  private ended = false;
  private error: WardenError | undefined;

  constructor(
    readonly request: StartRequest,
    readonly signal: AbortSignal,
    readonly address: string,
    private readonly agent: FakeAgent,
  ) {
    if (signal.aborted) this.error = abortReason(signal);
    else
      signal.addEventListener(
        "abort",
        () => {
          this.throwError(abortReason(signal));
        },
        { once: true },
      );
  }

  get incarnation(): string {
    return this.request.incarnation;
  }

  spawned(): this {
    this.agent.running.add(this.request.incarnation);
    return this.push({ t: "spawned", address: this.address, pid: 1000, gpu: undefined });
  }

  ready(memoryBytes = 0): this {
    return this.push({ t: "ready", address: this.address, memoryBytes });
  }

  failed(message: string, extra: { code?: string; exitCode?: number; lastStderrLine?: string } = {}): this {
    this.agent.running.delete(this.request.incarnation);
    return this.push({ t: "failed", code: extra.code ?? "EXITED", message, exitCode: extra.exitCode, lastStderrLine: extra.lastStderrLine ?? "" });
  }

  /** Ends the stream without another event. */
  end(): void {
    this.ended = true;
    this.poke();
  }

  throwError(err: WardenError): void {
    this.error ??= err;
    this.poke();
  }

  private push(ev: StartEvent): this {
    this.sent.push(ev);
    this.queue.push(ev);
    this.poke();
    return this;
  }

  private poke(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<StartEvent> {
    for (;;) {
      if (this.error !== undefined) throw this.error;
      const ev = this.queue.shift();
      if (ev !== undefined) {
        yield ev;
        continue;
      }
      if (this.ended) return;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
    }
  }
}

/** Scripted stop behaviour: an answer or an error. */
export type StopScript = (request: StopRequest) => StopAnswer | WardenError | Promise<StopAnswer>;

/**
 * A node's agent. Starts run `startScript` (default: spawned then ready at
 * once); stops run `stopScript` (default: stopped). `duringStop` runs inside
 * stopBackend before its answer, to observe the loader at that moment.
 */
export class FakeAgent implements AgentPort {
  readonly starts: FakeStart[] = [];
  readonly stops: StopRequest[] = [];
  readonly isRunningCalls: string[] = [];
  readonly running = new Set<string>();
  startScript: (start: FakeStart) => void = (s) => {
    s.spawned().ready();
  };
  stopScript: StopScript = () => ({ t: "stopped" });
  duringStop: ((request: StopRequest) => void) | undefined;
  /** Whether a process still runs (asked after a failed local stop). Default: the agent's own `running` set. */
  isRunningAnswer: ((incarnation: string) => boolean) | undefined;
  private nextPort = 5000;

  constructor(
    readonly nodeId: string,
    private readonly log: string[],
  ) {}

  startBackend(request: StartRequest, options: { readonly signal: AbortSignal }): AsyncIterable<StartEvent> {
    const s = new FakeStart(request, options.signal, `${this.nodeId}:${String(this.nextPort++)}`, this);
    this.starts.push(s);
    this.log.push(`start ${request.model} ${request.incarnation}`);
    this.startScript(s);
    return s;
  }

  async stopBackend(request: StopRequest): Promise<StopAnswer> {
    this.stops.push(request);
    this.log.push(`stop ${request.incarnation}${request.force ? " force" : ""}`);
    this.duringStop?.(request);
    const r = await this.stopScript(request);
    if (r instanceof WardenError) throw r;
    this.running.delete(request.incarnation);
    return r;
  }

  async isRunning(incarnation: string): Promise<boolean> {
    this.isRunningCalls.push(incarnation);
    return this.isRunningAnswer === undefined ? this.running.has(incarnation) : this.isRunningAnswer(incarnation);
  }

  /** The latest start of `model` (throws when there is none). */
  startOf(model: string): FakeStart {
    const s = this.starts.filter((x) => x.request.model === model).at(-1);
    if (s === undefined) throw new Error(`no start of ${model} on ${this.nodeId}`);
    return s;
  }

  stopsOf(incarnation: string): StopRequest[] {
    return this.stops.filter((s) => s.incarnation === incarnation);
  }
}

export class FakeDirectory implements AgentDirectory {
  readonly agents = new Map<string, FakeAgent>();
  readonly local = new Set<string>();

  agent(nodeId: string): AgentPort | undefined {
    return this.agents.get(nodeId);
  }

  isLocal(nodeId: string): boolean {
    return this.local.has(nodeId);
  }
}

/** The loader's client of one backend: counts Free calls and closes. */
export class FakeBackend implements BackendHandle {
  freeCalls = 0;
  closed = false;

  constructor(
    readonly address: string,
    private readonly connector: FakeConnector,
  ) {}

  async free(): Promise<void> {
    this.freeCalls++;
    this.connector.log.push(`free ${this.address}`);
    await this.connector.freeScript(this.address);
  }

  close(): void {
    this.closed = true;
  }
}

export class FakeConnector implements BackendConnector<FakeBackend> {
  readonly connected: FakeBackend[] = [];
  freeScript: (address: string) => Promise<void> = async () => {};

  constructor(readonly log: string[]) {}

  connect(address: string): FakeBackend {
    const b = new FakeBackend(address, this);
    this.connected.push(b);
    return b;
  }

  /** Free calls over every client ever connected to `address`. */
  freeCallsAt(address: string): number {
    return this.connected.filter((b) => b.address === address).reduce((n, b) => n + b.freeCalls, 0);
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
  readonly calls: string[] = [];

  choose(spec: ModelSpec): { readonly nodeId: string } | { readonly nodeId: undefined; readonly reason: string } {
    this.calls.push(spec.id);
    const nodeId = this.route.get(spec.id) ?? this.defaultNode;
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

export interface HarnessOptions {
  readonly models?: readonly ModelSpec[];
  readonly policy?: PolicyPatch;
  readonly stop?: Partial<StopTimings>;
  readonly enforcement?: { readonly maxAttempts: number; readonly intervalMs: number };
  readonly cooldown?: CooldownPolicy;
  readonly stuckAfterMs?: number;
  readonly maxWaitingPerModel?: number;
}

/** Models m1…m4 on backend "sim", no groups, 10 min load deadline. */
export function defaultModels(): ModelSpec[] {
  return ["m1", "m2", "m3", "m4"].map((id) => modelSpec({ id, backend: "sim" }));
}

/**
 * A loader wired to fakes: node `n1` is the embedded (local) agent, `n2` a
 * registered (remote) agent; placement defaults to n1. Leftover backoff is
 * 1 s doubling to 8 s without jitter, so retry times are exact.
 */
export function createHarness(o: HarnessOptions = {}) {
  const clock = new ManualClock();
  const log: string[] = [];
  const n1 = new FakeAgent("n1", log);
  const n2 = new FakeAgent("n2", log);
  const directory = new FakeDirectory();
  directory.agents.set("n1", n1);
  directory.agents.set("n2", n2);
  directory.local.add("n1");
  const connector = new FakeConnector(log);
  const journal = new FakeJournal(log);
  const events = new FakeEvents(log);
  const placement = new FakePlacement();
  const inventory = new FakeInventory();
  const warnings: string[] = [];
  let seq = 0;
  const loader = new Loader<FakeBackend>({
    clock,
    rng: seededRng(7),
    sleep: (ms, signal) => sleep(clock, ms, signal),
    agents: directory,
    backends: connector,
    journal,
    events,
    placement,
    inventories: inventory,
    mintIncarnation: () => `inc-${String(++seq)}`,
    models: o.models ?? defaultModels(),
    ...(o.policy === undefined ? {} : { policy: o.policy }),
    ...(o.stop === undefined ? {} : { stop: o.stop }),
    ...(o.enforcement === undefined ? {} : { enforcement: o.enforcement }),
    ...(o.cooldown === undefined ? {} : { cooldown: o.cooldown }),
    ...(o.stuckAfterMs === undefined ? {} : { stuckAfterMs: o.stuckAfterMs }),
    ...(o.maxWaitingPerModel === undefined ? {} : { maxWaitingPerModel: o.maxWaitingPerModel }),
    leftoverBackoff: { initialMs: 1_000, factor: 2, maxMs: 8_000, jitter: 0 },
    onWarning: (msg) => {
      warnings.push(msg);
    },
  });

  /** Advances the clock by `ms`, stopping at every timer on the way and letting promise chains run after each. */
  async function run(ms: number): Promise<void> {
    const target = clock.now() + ms;
    await flush();
    for (;;) {
      const next = clock.nextTimerAtMs();
      if (next === undefined || next > target) break;
      clock.advance(Math.max(0, next - clock.now()));
      await flush();
    }
    clock.advance(target - clock.now());
    await flush();
  }

  /** Steps through timers until `pred` holds; fails if it does not within `limitMs` of clock time. */
  async function until(pred: () => boolean, limitMs = 120_000): Promise<void> {
    const end = clock.now() + limitMs;
    await flush();
    while (!pred()) {
      const next = clock.nextTimerAtMs();
      if (next === undefined || next > end) throw new Error(`condition not reached within ${String(limitMs)}ms of clock time`);
      clock.advance(Math.max(0, next - clock.now()));
      await flush();
    }
  }

  /** Records how a promise ended without letting an expected rejection go unhandled. */
  function track<T>(p: Promise<T>): { readonly done: () => boolean; readonly value: () => T; readonly error: () => WardenError } {
    let state: { t: "pending" } | { t: "ok"; v: T } | { t: "err"; e: unknown } = { t: "pending" };
    p.then(
      (v) => {
        state = { t: "ok", v };
      },
      (e: unknown) => {
        state = { t: "err", e };
      },
    );
    return {
      done: () => state.t !== "pending",
      value: () => {
        if (state.t !== "ok") throw new Error(`promise not fulfilled: ${state.t === "err" ? String(state.e) : "pending"}`);
        return state.v;
      },
      error: () => {
        if (state.t !== "err") throw new Error(`promise not rejected (${state.t})`);
        return WardenError.from(state.e);
      },
    };
  }

  const never = new AbortController().signal;
  return { clock, log, n1, n2, directory, connector, journal, events, placement, inventory, warnings, loader, never, run, until, track, flush };
}

export type Harness = ReturnType<typeof createHarness>;

/** The WardenError a promise rejects with; fails the test if it fulfils. */
export async function rejection(p: Promise<unknown>): Promise<WardenError> {
  try {
    await p;
  } catch (err) {
    return WardenError.from(err);
  }
  throw new Error("expected a rejection, got a value");
}

/** An error as an agent RPC would reject with it. */
export function rpcError(code: Code, message: string): WardenError {
  return new WardenError(code, message);
}
