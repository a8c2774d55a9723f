import { lstat, readdir } from "node:fs/promises";
import { join } from "node:path";

/**
 * Bytes a directory tree takes on disk (allocated blocks, as `du` counts
 * them), symlinks never followed. An entry that vanishes while it is walked
 * counts nothing. Bounded by what it walks: an installed bundle, itself
 * bounded at unpacking (backend-bundle.ts).
 */
export async function diskUsage(root: string): Promise<number> {
  let total = 0;
  const stack = [root];
  for (let dir = stack.pop(); dir !== undefined; dir = stack.pop()) {
    const st = await lstat(dir).catch(() => undefined);
    if (st === undefined) continue;
    total += st.blocks * 512;
    if (!st.isDirectory()) continue;
    const names = await readdir(dir).catch(() => [] as string[]);
    for (const n of names) stack.push(join(dir, n));
  }
  return total;
}
