import { chmod, mkdir, readdir, stat } from "node:fs/promises";
import { join } from "node:path";

/** A state directory: its owner only. */
export const privateDirMode = 0o700;
/** A state file (journal, records): its owner only. */
export const privateFileMode = 0o600;

/** What a tightening changed, for the caller's log: the path and its old mode (octal text). */
export interface ModeTightened {
  readonly path: string;
  readonly was: string;
  readonly now: string;
}

const octal = (mode: number): string => `0${(mode & 0o777).toString(8)}`;

/**
 * Creates `dir` (and missing parents) owner-only, and tightens an existing
 * one that group or others may enter or read. A directory that is not ours
 * or is shared on purpose (the sticky bit, as /tmp) is left alone: its
 * files are owner-only anyway, and a chmod there would break others.
 * Returns what it changed, or undefined.
 */
export async function ensurePrivateDir(dir: string): Promise<ModeTightened | undefined> {
  await mkdir(dir, { recursive: true, mode: privateDirMode });
  const s = await stat(dir);
  if ((s.mode & 0o077) === 0 || (s.mode & 0o1000) !== 0) return undefined;
  if (typeof process.getuid === "function" && s.uid !== process.getuid()) return undefined;
  await chmod(dir, privateDirMode);
  return { path: dir, was: octal(s.mode), now: octal(privateDirMode) };
}

/**
 * Makes an existing file owner-only when group or others may read or write
 * it (one written before Warden created its files 0600). Absent: nothing.
 * Returns what it changed, or undefined.
 */
export async function tightenFile(path: string): Promise<ModeTightened | undefined> {
  const s = await stat(path).catch((err: unknown) => {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  });
  if (s === undefined || !s.isFile() || (s.mode & 0o077) === 0) return undefined;
  if (typeof process.getuid === "function" && s.uid !== process.getuid()) return undefined;
  await chmod(path, privateFileMode);
  return { path, was: octal(s.mode), now: octal(privateFileMode) };
}

/**
 * A state directory made private at start: `dir` as ensurePrivateDir, then
 * each file directly in it as tightenFile (subdirectories are their owners'
 * to check). Returns every change, for the caller to log.
 */
export async function privateStateDir(dir: string): Promise<ModeTightened[]> {
  const changed: ModeTightened[] = [];
  const d = await ensurePrivateDir(dir);
  if (d !== undefined) changed.push(d);
  for (const e of await readdir(dir, { withFileTypes: true })) {
    if (!e.isFile()) continue;
    const f = await tightenFile(join(dir, e.name));
    if (f !== undefined) changed.push(f);
  }
  return changed;
}
