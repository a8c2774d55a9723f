import type { StartLog } from "./start-log.js";

/** One start by incarnation: its event log, replayed to every StartBackend call that attaches. */
export interface StartEntry {
  readonly log: StartLog;
  readonly model: string;
  readonly backend: string;
  /** Settles when the start flow finished (ready, or failed and cleaned up). */
  done: Promise<void>;
}

/** Finished starts remembered for idempotency (a repeat attaches instead of spawning). */
const maxRememberedStarts = 4096;

/** The starts the agent knows of, by incarnation (its own, and the adopted backends' synthetic ones). */
export class StartRegistry {
  private readonly byIncarnation = new Map<string, StartEntry>();

  /** `hasBackend(incarnation)`: the process table still holds it (its start is not forgotten then). */
  constructor(private readonly hasBackend: (incarnation: string) => boolean) {}

  get(incarnation: string): StartEntry | undefined {
    return this.byIncarnation.get(incarnation);
  }

  /** Remembers a new start, forgetting finished ones of gone backends beyond maxRememberedStarts. */
  remember(incarnation: string, entry: StartEntry): void {
    this.byIncarnation.set(incarnation, entry);
    if (this.byIncarnation.size <= maxRememberedStarts) return;
    for (const [k, e] of this.byIncarnation) {
      if (this.byIncarnation.size <= maxRememberedStarts) break;
      if (e.log.terminal() && !this.hasBackend(k)) this.byIncarnation.delete(k);
    }
  }

  /** Records the (already ready) start of an adopted backend. */
  setAdopted(incarnation: string, entry: StartEntry): void {
    this.byIncarnation.set(incarnation, entry);
  }

  /** Every start's completion, settled or not. */
  allDone(): Promise<void>[] {
    return [...this.byIncarnation.values()].map((s) => s.done);
  }
}
