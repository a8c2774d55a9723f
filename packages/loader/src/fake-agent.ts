import { WardenError, abortReason } from "@warden/common";
import type { AgentPort, FreeAnswer, FreeRequest, StartEvent, StartRequest, StopAnswer, StopRequest } from "./ports.js";
import { FakeFrees } from "./fake-ports.js";

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

  /** Any event before the spawn (`pulling`, a bundle's `stage`), as the agent streams it. */
  event(ev: Extract<StartEvent, { t: "pulling" } | { t: "stage" }>): this {
    return this.push(ev);
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
 * once); stops run `stopScript` (default: stopped); Frees go to `frees`. `duringStop` runs inside
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
  /** The next start gets this address (a port the agent recycled after its process exited). */
  recycledAddress: string | undefined;

  /** The Free calls this agent sent (shared with the harness's other agents when given). */
  readonly frees: FakeFrees;

  constructor(
    readonly nodeId: string,
    private readonly log: string[],
    frees?: FakeFrees,
  ) {
    this.frees = frees ?? new FakeFrees(log);
  }

  startBackend(request: StartRequest, options: { readonly signal: AbortSignal }): AsyncIterable<StartEvent> {
    const address = this.recycledAddress ?? `${this.nodeId}:${String(this.nextPort++)}`;
    this.recycledAddress = undefined;
    const s = new FakeStart(request, options.signal, address, this);
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

  /** The Free calls sent through this agent. */
  readonly freeRequests: FreeRequest[] = [];

  freeBackend(request: FreeRequest): Promise<FreeAnswer> {
    this.freeRequests.push(request);
    return this.frees.run(request);
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

