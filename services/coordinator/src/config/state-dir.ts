import { mkdir, stat } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import { invalidArgument } from "@warden/common";

/**
 * Creates the state directory one level at a time and fails with the field
 * and the cause. Not `mkdir(…, { recursive: true })`: on Node 20 that never
 * returns for a path under /proc (it retries the ENOENT forever), so a
 * mistyped `--state-dir /proc/…` would hang the start without a word.
 */
export async function ensureStateDir(dir: string, field: string): Promise<string> {
  const abs = resolve(dir);
  const missing: string[] = [];
  let p = abs;
  for (;;) {
    const s = await stat(p).catch((err: unknown) => {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw invalidArgument(field, `cannot use ${abs}: ${(err as Error).message}`);
    });
    if (s !== undefined) {
      if (!s.isDirectory()) throw invalidArgument(field, `cannot use ${abs}: ${p} is not a directory`);
      break;
    }
    missing.push(p);
    const up = dirname(p);
    if (up === p) break;
    p = up;
  }
  for (const m of missing.reverse()) {
    // Owner-only, as everything Warden creates for its state (the leaf is checked again at start).
    await mkdir(m, { mode: 0o700 }).catch((err: unknown) => {
      if ((err as NodeJS.ErrnoException).code === "EEXIST") return;
      throw invalidArgument(field, `cannot create ${abs}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message} at ${m}`);
    });
  }
  return abs;
}
