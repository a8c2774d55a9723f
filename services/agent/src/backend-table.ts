import type { Clock } from "@warden/common";
import type { BackendProcess } from "./backend-process.js";

/** An exited backend stays listed (state exited) at most this long if no inventory shows it. */
const exitedRetentionMs = 60_000;

/**
 * The process table: one owner per backend, by incarnation. An exited entry is
 * shown in one inventory and dropped at the next, or after exitedRetentionMs
 * when nobody lists the agent.
 */
export class BackendTable {
  private readonly byIncarnation = new Map<string, BackendProcess>();
  /** Exited entries already shown once in an inventory; dropped at the next. */
  private readonly shownExited = new Set<string>();
  /** When each exited entry exited (monotonic ms): entries nobody lists are still dropped after exitedRetentionMs. */
  private readonly exitedAtMs = new Map<string, number>();

  constructor(private readonly clock: Clock) {}

  get(incarnation: string): BackendProcess | undefined {
    return this.byIncarnation.get(incarnation);
  }

  has(incarnation: string): boolean {
    return this.byIncarnation.has(incarnation);
  }

  set(incarnation: string, proc: BackendProcess): void {
    this.byIncarnation.set(incarnation, proc);
  }

  /** Every entry, exited ones included, in insertion order. */
  values(): Iterable<BackendProcess> {
    return this.byIncarnation.values();
  }

  /** Starts the retention clock of an entry that just exited. */
  noteExited(incarnation: string): void {
    this.exitedAtMs.set(incarnation, this.clock.now());
  }

  /** Bounds the table without relying on inventories being read (an embedded agent may never be listed). */
  pruneExited(): void {
    const now = this.clock.now();
    for (const [inc, at] of this.exitedAtMs) {
      if (now - at < exitedRetentionMs) continue;
      this.exitedAtMs.delete(inc);
      this.shownExited.delete(inc);
      if (this.byIncarnation.get(inc)?.state().t === "exited") this.byIncarnation.delete(inc);
    }
  }

  /** The entries an inventory shows now, taken synchronously; exited entries are shown once, then dropped. */
  takeInventory(): BackendProcess[] {
    this.pruneExited();
    const procs: BackendProcess[] = [];
    for (const [inc, p] of this.byIncarnation) {
      if (p.state().t === "exited") {
        if (this.shownExited.has(inc)) {
          this.byIncarnation.delete(inc);
          this.shownExited.delete(inc);
          this.exitedAtMs.delete(inc);
          continue;
        }
        this.shownExited.add(inc);
      }
      procs.push(p);
    }
    return procs;
  }

  /** Live (not exited) entries. */
  live(): BackendProcess[] {
    return [...this.byIncarnation.values()].filter((p) => p.state().t !== "exited");
  }

  /** The live backend listening on `address`, if any. */
  liveOnAddress(address: string): BackendProcess | undefined {
    for (const p of this.byIncarnation.values()) if (p.id.address === address && p.state().t !== "exited") return p;
    return undefined;
  }
}
