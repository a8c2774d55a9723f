import { Code, WardenError, type Logger } from "@warden/common";
import { stateSections, type DurableStateStore, type StateEntry, type StateSection } from "./durable-state-port.js";

/**
 * One operator change of a durable setting, decided in the key's turn:
 * `step` validates the whole request against the state now (throwing
 * changes nothing) and says what to write; `apply` runs after the store
 * acknowledged it, in one synchronous turn. `none`: nothing to write (an
 * idempotent call), `result` answers it.
 */
export type SettingsChange<T> =
  | { readonly t: "put"; readonly value: unknown; readonly apply: () => T }
  | { readonly t: "remove"; readonly apply: () => T }
  | { readonly t: "none"; readonly result: () => T };

/** How the Admin service makes an operator's change (durable in HA, in memory otherwise). */
export interface SettingsWriter {
  change<T>(section: StateSection, id: string, step: () => SettingsChange<T>): Promise<T>;
}

/**
 * No store (Admin services built without one, in tests): `step` and `apply`
 * run in the caller's turn. A running coordinator always has a store: HA's
 * bucket or, on one machine, the file in its state dir.
 */
export const inMemorySettings: SettingsWriter = {
  change<T>(_section: StateSection, _id: string, step: () => SettingsChange<T>): Promise<T> {
    try {
      const c = step();
      return Promise.resolve(c.t === "none" ? c.result() : c.apply());
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  },
};

/** What the store held at start, by section and id (values not yet parsed). */
export type LoadedSettings = ReadonlyMap<StateSection, ReadonlyMap<string, StateEntry>>;

/** The revision this coordinator last read or wrote for one key; `uncertain` after a write of unknown outcome. */
interface KeyState {
  revision: number;
  /** The JSON of the last write whose outcome is unknown (undefined = a remove), when `uncertain`. */
  attempted?: string | undefined;
  uncertain: boolean;
}

const keyOf = (section: StateSection, id: string): string => `${section}\u0000${id}`;

/**
 * The coordinator's durable settings in HA: every operator change
 * is written to the store with the revision last read or written for its key
 * and acknowledged before it is applied. One queue per key: a key's changes
 * run one after another (validate, write, apply), so no two of them
 * interleave across the write's await.
 *
 * - A refused `step` or a failed write changes nothing and applies nothing;
 *   a write without quorum answers UNAVAILABLE naming the store.
 * - ABORTED from the store (the key changed under us: another coordinator
 *   wrote it, an old leader waking up or the new one) means this
 *   coordinator is stale: that call answers ABORTED and every later one
 *   FAILED_PRECONDITION, nothing applied.
 * - A write whose outcome is unknown (timeout, lost connection) may have
 *   landed: the key's next change reads it back first and goes on only when
 *   the store holds what was attempted or what was there before.
 */
export class DurableSettings implements SettingsWriter {
  private readonly keys = new Map<string, KeyState>();
  private readonly tails = new Map<string, Promise<void>>();
  private stale: string | undefined;

  private constructor(
    private readonly store: DurableStateStore,
    private readonly log: Logger,
  ) {}

  /**
   * Reads every section (start-up = takeover). Fails (UNAVAILABLE naming the
   * store) when the store cannot answer: a leader that cannot read its
   * settings must not lead with the config's alone.
   */
  static async load(store: DurableStateStore, log: Logger, signal?: AbortSignal): Promise<{ settings: DurableSettings; loaded: LoadedSettings }> {
    const settings = new DurableSettings(store, log);
    const loaded = new Map<StateSection, ReadonlyMap<string, StateEntry>>();
    const sections = await Promise.all(stateSections.map(async (s) => [s, await store.load(s, signal)] as const));
    for (const [section, entries] of sections) {
      loaded.set(section, entries);
      for (const [id, e] of entries) settings.keys.set(keyOf(section, id), { revision: e.revision, uncertain: false });
    }
    return { settings, loaded };
  }

  /** The store's name (for logs and errors). */
  get storeName(): string {
    return this.store.name;
  }

  change<T>(section: StateSection, id: string, step: () => SettingsChange<T>): Promise<T> {
    const k = keyOf(section, id);
    const run = (this.tails.get(k) ?? Promise.resolve()).then(() => this.run(section, id, k, step));
    const tail = run.then(
      () => undefined,
      () => undefined,
    );
    this.tails.set(k, tail);
    void tail.then(() => {
      if (this.tails.get(k) === tail) this.tails.delete(k);
    });
    return run;
  }

  /**
   * Removes a key on the coordinator's own account (a lost node heard from
   * again, an expired forgotten entry): queued like an operator's change,
   * logged instead of answered when it fails.
   */
  drop(section: StateSection, id: string, why: string): void {
    if (this.keys.get(keyOf(section, id)) === undefined && !this.tails.has(keyOf(section, id))) return;
    void this.change(section, id, () => (this.keys.get(keyOf(section, id)) === undefined ? { t: "none", result: () => undefined } : { t: "remove", apply: () => undefined })).catch((err: unknown) => {
      this.log.warn("durable setting not removed (it is applied again at the next takeover)", { section, id, why, err: String(err) });
    });
  }

  /** True while the store holds an entry for this key (as far as this coordinator wrote or read it). */
  has(section: StateSection, id: string): boolean {
    return this.keys.has(keyOf(section, id));
  }

  private async run<T>(section: StateSection, id: string, k: string, step: () => SettingsChange<T>): Promise<T> {
    if (this.stale !== undefined) throw this.staleError();
    await this.settleUncertain(section, id, k);
    const c = step();
    if (c.t === "none") return c.result();
    const before = this.keys.get(k);
    const expected = before?.revision ?? 0;
    const attempted = c.t === "put" ? JSON.stringify(c.value) : undefined;
    try {
      if (c.t === "put") {
        const revision = await this.store.put(section, id, c.value, expected);
        this.keys.set(k, { revision, uncertain: false });
      } else if (expected > 0) {
        await this.store.remove(section, id, expected);
        this.keys.delete(k);
      }
    } catch (err) {
      throw this.failed(section, id, k, expected, attempted, err);
    }
    return c.apply();
  }

  /** After a write of unknown outcome: what the store holds now decides whether this coordinator still owns the key. */
  private async settleUncertain(section: StateSection, id: string, k: string): Promise<void> {
    const st = this.keys.get(k);
    if (st?.uncertain !== true) return;
    let now: StateEntry | undefined;
    try {
      now = await this.store.get(section, id);
    } catch (err) {
      throw this.unavailable(section, id, err);
    }
    const landed = st.attempted === undefined ? now === undefined : now !== undefined && JSON.stringify(now.value) === st.attempted;
    if (landed) {
      if (now === undefined) this.keys.delete(k);
      else this.keys.set(k, { revision: now.revision, uncertain: false });
      return;
    }
    const untouched = st.revision === 0 ? now === undefined : now?.revision === st.revision;
    if (untouched) {
      if (st.revision === 0) this.keys.delete(k);
      else this.keys.set(k, { revision: st.revision, uncertain: false });
      return;
    }
    throw this.superseded(section, id, st.revision);
  }

  private failed(section: StateSection, id: string, k: string, expected: number, attempted: string | undefined, err: unknown): WardenError {
    if (err instanceof WardenError && err.code === Code.Aborted) return this.superseded(section, id, expected);
    // Refused before anything was sent (a value over the store's bound): nothing changed.
    if (err instanceof WardenError && err.code === Code.InvalidArgument) return err;
    // Unknown outcome: the next change of this key reads it back first.
    this.keys.set(k, { revision: expected, attempted, uncertain: true });
    return this.unavailable(section, id, err);
  }

  private unavailable(section: StateSection, id: string, err: unknown): WardenError {
    if (err instanceof WardenError && err.code === Code.Unavailable && err.message.includes(this.store.name)) return err;
    return new WardenError(Code.Unavailable, `state store ${this.store.name}: ${section} "${id}" not written (${err instanceof Error ? err.message : String(err)}); nothing was changed`, { cause: err, details: { store: this.store.name } });
  }

  private superseded(section: StateSection, id: string, revision: number): WardenError {
    this.stale = `${section} "${id}" changed in state store ${this.store.name} since revision ${String(revision)}, which this coordinator last wrote or read`;
    this.log.error("durable settings changed by another coordinator: this one is stale and refuses every further change", { section, id, revision, store: this.store.name });
    return new WardenError(Code.Aborted, `${this.stale}: another coordinator leads (this one is stale); nothing was applied`, { details: { store: this.store.name } });
  }

  private staleError(): WardenError {
    return new WardenError(Code.FailedPrecondition, `this coordinator is stale (${this.stale ?? ""}): it refuses changes; ask the current leader`, { details: { store: this.store.name } });
  }
}
