import { readFile, readdir, unlink } from "node:fs/promises";
import { privateStateDir, type ModeTightened } from "@warden/common";
import { join } from "node:path";
import { writeFileAtomic } from "./atomic-write.js";
import { parseBackendRecord, type BackendRecord, type ParsedRecord } from "./backend-record.js";

/**
 * One JSON file per backend in the state dir, named `<incarnation>.json`,
 * written atomically (temp file, fsync, rename, fsync of the directory) so a
 * crash leaves either the old or the new record, never half of one. Writes for
 * one incarnation are applied in call order.
 */
export class RecordStore {
  private readonly chains = new Map<string, Promise<void>>();

  constructor(readonly dir: string) {}

  /**
   * Creates the directory owner-only (0700); an existing one, and the files in
   * it, are tightened when others could read them. Returns what it changed.
   */
  init(): Promise<ModeTightened[]> {
    return privateStateDir(this.dir);
  }

  private fileOf(incarnation: string): string {
    return join(this.dir, `${incarnation}.json`);
  }

  private enqueue(key: string, op: () => Promise<void>): Promise<void> {
    const prev = this.chains.get(key) ?? Promise.resolve();
    const next = prev.then(op, op);
    this.chains.set(key, next);
    void next.finally(() => {
      if (this.chains.get(key) === next) this.chains.delete(key);
    }).catch(() => {});
    return next;
  }

  /** Writes (replaces) the record of `record.incarnation`. */
  write(record: BackendRecord): Promise<void> {
    const text = `${JSON.stringify(record, null, 2)}\n`;
    return this.enqueue(record.incarnation, () => writeFileAtomic(this.fileOf(record.incarnation), text));
  }

  /** Removes the record; a missing file is fine. */
  remove(incarnation: string): Promise<void> {
    return this.enqueue(incarnation, async () => {
      await unlink(this.fileOf(incarnation)).catch((err: unknown) => {
        if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
      });
    });
  }

  /** Removes a record file by name (partial records found at start). */
  async removeFile(file: string): Promise<void> {
    await unlink(join(this.dir, file)).catch(() => {});
  }

  /** Every record file in the directory, parsed (temp files are ignored). */
  async list(): Promise<ParsedRecord[]> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch {
      return [];
    }
    const out: ParsedRecord[] = [];
    for (const name of names.sort()) {
      if (!name.endsWith(".json") || name.startsWith(".")) continue;
      try {
        out.push(parseBackendRecord(name, await readFile(join(this.dir, name), "utf8")));
      } catch {
        // vanished meanwhile
      }
    }
    return out;
  }

  /** Resolves when every queued write has been applied. */
  async flush(): Promise<void> {
    await Promise.allSettled([...this.chains.values()]);
  }
}
