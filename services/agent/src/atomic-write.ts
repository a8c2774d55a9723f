import { open, rename } from "node:fs/promises";
import { dirname, join } from "node:path";

let tmpCounter = 0;

/**
 * Replaces `file` atomically: temp file in the same directory, fsync, rename,
 * fsync of the directory, so a crash leaves either the old or the new content,
 * never half of it. The temp name starts with "." (record-store.ts skips those).
 */
export async function writeFileAtomic(file: string, text: string): Promise<void> {
  const dir = dirname(file);
  const tmp = join(dir, `.${String(process.pid)}.${String(tmpCounter++)}.tmp`);
  const fh = await open(tmp, "w", 0o600);
  try {
    await fh.writeFile(text, "utf8");
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, file);
  const dh = await open(dir, "r");
  try {
    await dh.sync();
  } catch {
    // some filesystems refuse fsync on directories; the rename is still atomic
  } finally {
    await dh.close();
  }
}
