import { Code, WardenError } from "@warden/common";
import type { DurableStateStore, StateEntry, StateSection } from "./durable-state-port.js";

/**
 * An in-memory DurableStateStore for tests (the port's contract: revision
 * checks, ABORTED on a stale one with nothing written). `failNext` makes the
 * next write fail UNAVAILABLE, before (`lost`) or after (`landed`) it took
 * effect; `gate` holds writes until released; `writes` counts the puts and
 * removes that took effect.
 */
export class MemoryStateStore implements DurableStateStore {
  readonly name = "memory-state";
  private readonly entries = new Map<string, StateEntry>();
  private revision = 0;
  writes = 0;
  failNext: "lost" | "landed" | undefined;
  unavailable = false;
  private held: (() => void)[] | undefined;

  private key(section: StateSection, id: string): string {
    return `${section}\u0000${id}`;
  }

  /** Holds every write until `release()`. */
  gate(): void {
    this.held = [];
  }

  /** Writes held by the gate now. */
  get waiting(): number {
    return this.held?.length ?? 0;
  }

  release(): void {
    const h = this.held ?? [];
    this.held = undefined;
    for (const r of h) r();
  }

  /** A write by someone else (another coordinator). */
  foreignPut(section: StateSection, id: string, value: unknown): number {
    this.revision++;
    this.entries.set(this.key(section, id), { value: structuredClone(value), revision: this.revision });
    return this.revision;
  }

  peek(section: StateSection, id: string): unknown {
    return this.entries.get(this.key(section, id))?.value;
  }

  private async wait(): Promise<void> {
    const held = this.held;
    if (held !== undefined) await new Promise<void>((r) => held.push(r));
    if (this.unavailable) throw new WardenError(Code.Unavailable, `state store ${this.name}: no quorum`);
  }

  async get(section: StateSection, id: string): Promise<StateEntry | undefined> {
    if (this.unavailable) throw new WardenError(Code.Unavailable, `state store ${this.name}: no quorum`);
    return this.entries.get(this.key(section, id));
  }

  async load(section: StateSection): Promise<ReadonlyMap<string, StateEntry>> {
    if (this.unavailable) throw new WardenError(Code.Unavailable, `state store ${this.name}: no quorum`);
    const out = new Map<string, StateEntry>();
    for (const [k, e] of this.entries) {
      const [s, id] = k.split("\u0000") as [string, string];
      if (s === section) out.set(id, e);
    }
    return out;
  }

  async put(section: StateSection, id: string, value: unknown, expectedRevision: number): Promise<number> {
    await this.wait();
    const k = this.key(section, id);
    const fail = this.failNext;
    this.failNext = undefined;
    if (fail === "lost") throw new WardenError(Code.Unavailable, `state store ${this.name}: put timed out`);
    const current = this.entries.get(k)?.revision ?? 0;
    if (current !== expectedRevision) throw new WardenError(Code.Aborted, `state store ${this.name}: ${section} "${id}" changed since revision ${String(expectedRevision)}`);
    this.revision++;
    this.entries.set(k, { value: structuredClone(value), revision: this.revision });
    this.writes++;
    if (fail === "landed") throw new WardenError(Code.Unavailable, `state store ${this.name}: put timed out`);
    return this.revision;
  }

  async remove(section: StateSection, id: string, expectedRevision: number): Promise<void> {
    await this.wait();
    const k = this.key(section, id);
    const current = this.entries.get(k)?.revision ?? 0;
    if (current !== expectedRevision) throw new WardenError(Code.Aborted, `state store ${this.name}: ${section} "${id}" changed since revision ${String(expectedRevision)}`);
    this.entries.delete(k);
    this.writes++;
  }
}
