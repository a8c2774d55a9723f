import { abortReason } from "@warden/common";
import type { StartFailureCode } from "@warden/proto";
import type { BundleStage } from "./backend-bundle.js";

/** One step of a start, as streamed by StartBackend. */
export type StartEvent =
  | { t: "spawned"; address: string; pid: number; gpuDevice: string; bootEpochMs: number; heartbeatSequence: bigint }
  | { t: "pulling"; sha256: string; path: string; doneBytes: number; totalBytes: number; verified: boolean }
  | { t: "stage"; stage: BundleStage }
  | { t: "loading" }
  | { t: "ready"; address: string; pid: number; memoryBytes: number }
  | { t: "failed"; code: StartFailureCode; message: string; exitCode: number | undefined; lastStderrLine: string };

/**
 * The append-only history of one start. StartBackend streams follow it from the
 * beginning, so a repeat call with the same incarnation replays what already
 * happened and then waits for the rest — attaching, never spawning again.
 */
export class StartLog {
  private readonly events: StartEvent[] = [];
  private readonly wakers = new Set<() => void>();

  append(ev: StartEvent): void {
    if (this.terminal()) return;
    this.events.push(ev);
    for (const w of [...this.wakers]) w();
  }

  terminal(): boolean {
    const last = this.events[this.events.length - 1];
    return last?.t === "ready" || last?.t === "failed";
  }

  last(): StartEvent | undefined {
    return this.events[this.events.length - 1];
  }

  /** Yields every event from the first until the terminal one; stops early (throwing its reason) when `signal` aborts. */
  async *follow(signal: AbortSignal): AsyncGenerator<StartEvent> {
    let i = 0;
    for (;;) {
      while (i < this.events.length) {
        const ev = this.events[i++];
        if (ev !== undefined) yield ev;
        if (ev?.t === "ready" || ev?.t === "failed") return;
      }
      if (signal.aborted) throw abortReason(signal);
      await new Promise<void>((resolve) => {
        const done = (): void => {
          this.wakers.delete(done);
          signal.removeEventListener("abort", done);
          resolve();
        };
        this.wakers.add(done);
        signal.addEventListener("abort", done, { once: true });
      });
    }
  }
}
