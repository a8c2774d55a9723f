import { ManualClock } from "@warden/common";
import type { PolicyPatch } from "./policy.js";
import type { StopCommand, StopOutcome } from "./stop-command.js";
import { createWatchdogCore, type WatchdogCore } from "./watchdog-core.js";
import { createWatchdogService, type SettleReport, type StopPort, type WatchdogService } from "./watchdog-service.js";

/**
 * A hand-written fake stop port for tests (house style 20): records every
 * command, runs an optional hook inside the stop (before its outcome is
 * known, like LocalAI's failing-stop hook), and answers with a scripted
 * outcome — at once, or when the test releases it (`manual`).
 */
export class FakeStopPort implements StopPort {
  readonly calls: StopCommand[] = [];
  outcome: (command: StopCommand) => StopOutcome = () => ({ t: "stopped" });
  hook: ((command: StopCommand) => void) | undefined;
  manual = false;
  private readonly held = new Map<string, (o: StopOutcome) => void>();

  stop(command: StopCommand): Promise<StopOutcome> {
    this.calls.push(command);
    this.hook?.(command);
    if (this.manual) return new Promise((resolve) => this.held.set(command.incarnation, resolve));
    return Promise.resolve(this.outcome(command));
  }

  /** Incarnations whose manual stop has not been released yet. */
  heldIncarnations(): string[] {
    return [...this.held.keys()];
  }

  /** Releases a manual stop with `outcome` (default: the scripted one). */
  release(incarnation: string, outcome?: StopOutcome): void {
    const r = this.held.get(incarnation);
    if (r === undefined) throw new Error(`no held stop for ${incarnation}`);
    this.held.delete(incarnation);
    const cmd = this.calls.find((c) => c.incarnation === incarnation);
    r(outcome ?? (cmd === undefined ? { t: "stopped" } : this.outcome(cmd)));
  }

  models(): string[] {
    return this.calls.map((c) => c.model);
  }
}

/** A loader fake: holds every instance unless told otherwise. */
export class FakeLoader {
  holdsByDefault = true;
  readonly dropped = new Set<string>();
  readonly asked: string[] = [];
  hasModelAtAddress(_model: string, _address: string, incarnation: string): boolean {
    this.asked.push(incarnation);
    return this.holdsByDefault && !this.dropped.has(incarnation);
  }
}

export interface Fixture {
  readonly clock: ManualClock;
  readonly core: WatchdogCore;
  readonly svc: WatchdogService;
  readonly port: FakeStopPort;
  readonly loader: FakeLoader;
  readonly settles: SettleReport[];
  /** Registers `model` ready at `address` on `nodeId` and advances the clock 10 ms (LocalAI's registration gaps). */
  reg(address: string, model: string, options?: { nodeId?: string; sizeBytes?: number; gpu?: number }): string;
  /** Mark then UnMark. */
  idle(address: string): void;
  /** Mark without UnMark. */
  busy(address: string): void;
}

let fixtureCounter = 0;

export function createFixture(policy: PolicyPatch = {}): Fixture {
  const clock = new ManualClock(1_000);
  const loader = new FakeLoader();
  const port = new FakeStopPort();
  const core = createWatchdogCore({ clock, loader, policy });
  const settles: SettleReport[] = [];
  const svc = createWatchdogService({ core, stopPort: port, onSettled: (r) => settles.push(r) });
  return {
    clock,
    core,
    svc,
    port,
    loader,
    settles,
    reg(address, model, options = {}) {
      const incarnation = `inc-${model}-${++fixtureCounter}`;
      core.registerLoading({ nodeId: options.nodeId ?? "n1", model, incarnation, address, sizeBytes: options.sizeBytes, gpu: options.gpu });
      core.markReady(incarnation);
      clock.advance(10);
      return incarnation;
    },
    idle(address) {
      core.mark(address);
      core.unmark(address);
    },
    busy(address) {
      core.mark(address);
    },
  };
}

/** Lets every queued promise callback run (the fake port answers in microtasks). */
export async function flush(): Promise<void> {
  for (let i = 0; i < 10; i++) await Promise.resolve();
}
