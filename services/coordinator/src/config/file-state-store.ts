import { open, readFile, rename, unlink } from "node:fs/promises";
import { dirname, join } from "node:path";
import { Code, WardenError, invalidArgument } from "@warden/common";
import { stateSections, type DurableStateStore, type StateEntry, type StateSection } from "../ha/durable-state-port.js";

/** The file's name in the coordinator's state dir. */
export const operatorSettingsFile = "operator-settings.json";

export interface FileStateStoreOptions {
  /** Largest JSON value accepted (INVALID_ARGUMENT above it, nothing written). @default 65536, bounds 64 – 1 048 576 */
  readonly maxValueBytes?: number;
  /** Largest file accepted, read or written (INVALID_ARGUMENT for a write above it). @default 8 MiB, bounds 4 KiB – 64 MiB */
  readonly maxFileBytes?: number;
  /** Longest id accepted (node id, model, incarnation). @default 256 chars, bounds 1–1024 */
  readonly maxIdChars?: number;
}

/** The file as written: one revision counter and every entry by section and id. */
interface FileShape {
  readonly version: 1;
  readonly revision: number;
  readonly entries: Partial<Record<StateSection, Record<string, StateEntry>>>;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Parses the file whole; anything it does not understand is an error naming
 * the file and what is wrong (never a silently dropped setting).
 */
function parseFile(path: string, text: string): { revision: number; entries: Map<string, StateEntry> } {
  const bad = (why: string): WardenError =>
    new WardenError(Code.FailedPrecondition, `stateDir: the operator settings file ${path} is not readable: ${why}. It holds drains, policy, node limits and scale set through the Admin API: fix it, or move it aside to start with the config file's settings alone`, { details: { path } });
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw bad(`not JSON (${(err as Error).message})`);
  }
  if (!isRecord(raw) || raw["version"] !== 1) throw bad(`"version" is not 1`);
  const revision = raw["revision"];
  if (typeof revision !== "number" || !Number.isSafeInteger(revision) || revision < 0) throw bad(`"revision" is not a count`);
  const entries = new Map<string, StateEntry>();
  const sections = raw["entries"];
  if (!isRecord(sections)) throw bad(`"entries" is not an object`);
  for (const [section, ids] of Object.entries(sections)) {
    if (!stateSections.includes(section as StateSection)) throw bad(`unknown section "${section.slice(0, 64)}"`);
    if (!isRecord(ids)) throw bad(`section "${section}" is not an object`);
    for (const [id, e] of Object.entries(ids)) {
      if (!isRecord(e) || !("value" in e) || typeof e["revision"] !== "number" || !Number.isSafeInteger(e["revision"]) || e["revision"] < 1 || e["revision"] > revision) {
        throw bad(`entry ${section} "${id.slice(0, 64)}" has no value or a revision outside 1–${String(revision)}`);
      }
      entries.set(keyOf(section as StateSection, id), { value: e["value"], revision: e["revision"] });
    }
  }
  return { revision, entries };
}

const keyOf = (section: StateSection, id: string): string => `${section}\u0000${id}`;

/**
 * The durable-state port on one JSON file in the coordinator's state dir
 * (the single-machine coordinator's drains, lost nodes, forgotten instances,
 * policy, scale and node limits; HA keeps the same records in a JetStream KV
 * bucket). Every write replaces the file whole and atomically: the new
 * content goes to a temporary file (0600), is fsynced, renamed over the old
 * one, and the directory fsynced — a crash leaves the old file or the new
 * one, never a mix. Operator changes are rare and the file is bounded
 * (`maxFileBytes`), so rewriting it whole costs little; writes run one
 * after another. The revision checks are the port's contract (ABORTED on a
 * stale one, nothing written), so the same DurableSettings drives it.
 *
 * A file that cannot be read or parsed fails the open (FAILED_PRECONDITION
 * naming the file): a coordinator that lost an operator's drain must not
 * start as if there were none.
 */
export class FileStateStore implements DurableStateStore {
  readonly name: string;
  private chain: Promise<void> = Promise.resolve();

  private constructor(
    readonly path: string,
    private revision: number,
    private readonly entries: Map<string, StateEntry>,
    private readonly bounds: { readonly maxValueBytes: number; readonly maxFileBytes: number; readonly maxIdChars: number },
  ) {
    this.name = path;
  }

  /** Opens (reads and checks) the file in `stateDir`; no file = no settings yet. */
  static async open(stateDir: string, options: FileStateStoreOptions = {}): Promise<FileStateStore> {
    const maxValueBytes = options.maxValueBytes ?? 64 * 1024;
    const maxFileBytes = options.maxFileBytes ?? 8 * 1024 * 1024;
    const maxIdChars = options.maxIdChars ?? 256;
    const int = (field: string, v: number, lo: number, hi: number): void => {
      if (!Number.isInteger(v) || v < lo || v > hi) throw invalidArgument(field, `must be an integer from ${String(lo)} to ${String(hi)}`);
    };
    int("maxValueBytes", maxValueBytes, 64, 1024 * 1024);
    int("maxFileBytes", maxFileBytes, 4096, 64 * 1024 * 1024);
    int("maxIdChars", maxIdChars, 1, 1024);
    const path = join(stateDir, operatorSettingsFile);
    let text: string | undefined;
    try {
      const h = await open(path, "r");
      try {
        const { size } = await h.stat();
        if (size > maxFileBytes) throw new WardenError(Code.FailedPrecondition, `stateDir: the operator settings file ${path} is ${String(size)} bytes, over the bound of ${String(maxFileBytes)}: move it aside to start with the config file's settings alone`, { details: { path } });
        text = await readFile(h, "utf8");
      } finally {
        await h.close();
      }
    } catch (err) {
      if (err instanceof WardenError) throw err;
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw new WardenError(Code.FailedPrecondition, `stateDir: cannot read the operator settings file ${path}: ${(err as Error).message}`, { details: { path } });
    }
    const parsed = text === undefined ? { revision: 0, entries: new Map<string, StateEntry>() } : parseFile(path, text);
    return new FileStateStore(path, parsed.revision, parsed.entries, { maxValueBytes, maxFileBytes, maxIdChars });
  }

  private check(section: StateSection, id: string): string {
    if (!stateSections.includes(section)) throw invalidArgument("section", `must be one of ${stateSections.join(", ")}`);
    if (id.length === 0 || id.length > this.bounds.maxIdChars) throw invalidArgument("id", `must be 1–${String(this.bounds.maxIdChars)} characters`);
    return keyOf(section, id);
  }

  get(section: StateSection, id: string): Promise<StateEntry | undefined> {
    return Promise.resolve(this.entries.get(this.check(section, id)));
  }

  load(section: StateSection): Promise<ReadonlyMap<string, StateEntry>> {
    if (!stateSections.includes(section)) return Promise.reject(invalidArgument("section", `must be one of ${stateSections.join(", ")}`));
    const out = new Map<string, StateEntry>();
    const prefix = `${section}\u0000`;
    for (const [k, e] of this.entries) if (k.startsWith(prefix)) out.set(k.slice(prefix.length), e);
    return Promise.resolve(out);
  }

  put(section: StateSection, id: string, value: unknown, expectedRevision: number): Promise<number> {
    return this.serial(async () => {
      const k = this.check(section, id);
      if (!Number.isInteger(expectedRevision) || expectedRevision < 0) throw invalidArgument("expectedRevision", "must be an integer ≥ 0");
      const json = JSON.stringify(value) as string | undefined;
      if (json === undefined) throw invalidArgument("value", "must be JSON-serialisable");
      if (Buffer.byteLength(json, "utf8") > this.bounds.maxValueBytes) throw invalidArgument("value", `larger than ${String(this.bounds.maxValueBytes)} bytes as JSON`);
      this.expect(section, id, k, expectedRevision);
      const revision = this.revision + 1;
      const next = new Map(this.entries);
      next.set(k, { value: JSON.parse(json) as unknown, revision });
      await this.write(next, revision);
      return revision;
    });
  }

  remove(section: StateSection, id: string, expectedRevision: number): Promise<void> {
    return this.serial(async () => {
      const k = this.check(section, id);
      if (!Number.isInteger(expectedRevision) || expectedRevision < 1) throw invalidArgument("expectedRevision", "must be the entry's revision (≥ 1)");
      this.expect(section, id, k, expectedRevision);
      const next = new Map(this.entries);
      next.delete(k);
      await this.write(next, this.revision + 1);
    });
  }

  private expect(section: StateSection, id: string, k: string, expectedRevision: number): void {
    const current = this.entries.get(k)?.revision ?? 0;
    if (current !== expectedRevision) throw new WardenError(Code.Aborted, `state store ${this.name}: ${section} "${id}" changed since revision ${String(expectedRevision)}: read it again`);
  }

  /** One write at a time: each reads the entries the previous one left. */
  private serial<T>(f: () => Promise<T>): Promise<T> {
    const run = this.chain.then(f);
    this.chain = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }

  /** Writes `next` atomically, then (only then) makes it the store's state. */
  private async write(next: Map<string, StateEntry>, revision: number): Promise<void> {
    const entries: Partial<Record<StateSection, Record<string, StateEntry>>> = {};
    for (const [k, e] of next) {
      const [section, id] = k.split("\u0000") as [StateSection, string];
      (entries[section] ??= {})[id] = e;
    }
    const file: FileShape = { version: 1, revision, entries };
    const text = `${JSON.stringify(file)}\n`;
    if (Buffer.byteLength(text, "utf8") > this.bounds.maxFileBytes) throw invalidArgument("value", `the operator settings file would exceed its bound of ${String(this.bounds.maxFileBytes)} bytes; nothing was changed`);
    const tmp = `${this.path}.tmp`;
    try {
      const h = await open(tmp, "w", 0o600);
      try {
        await h.writeFile(text, "utf8");
        await h.sync();
      } finally {
        await h.close();
      }
      await rename(tmp, this.path);
      // Renamed: the file holds `next` (a failed directory sync below leaves the outcome unknown, read back as landed).
      this.applied(next, revision);
      const d = await open(dirname(this.path), "r");
      try {
        await d.sync();
      } finally {
        await d.close();
      }
    } catch (err) {
      if (this.revision !== revision) await unlink(tmp).catch(() => undefined);
      throw new WardenError(Code.Unavailable, `state store ${this.name}: not written (${(err as Error).message})`, { cause: err, details: { path: this.path } });
    }
  }

  private applied(next: Map<string, StateEntry>, revision: number): void {
    this.entries.clear();
    for (const [k, e] of next) this.entries.set(k, e);
    this.revision = revision;
  }
}
