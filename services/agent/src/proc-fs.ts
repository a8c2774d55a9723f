import { open, readFile, readdir, readlink } from "node:fs/promises";

// Thin readers of Linux /proc. Every function takes the /proc root so tests can
// point it at a fixture directory; production uses "/proc".

/** Parsed `/proc/<pid>/stat`: state letter and start time (field 22, clock ticks since boot). */
export interface PidStat {
  state: string;
  startTimeTicks: string;
  pgrp: number;
}

/**
 * Parses the content of /proc/<pid>/stat. The command name (field 2) is in
 * parentheses and may contain spaces and ")", so fields are counted from the
 * last ")".
 */
export function parsePidStat(text: string): PidStat | undefined {
  const close = text.lastIndexOf(")");
  if (close < 0) return undefined;
  const rest = text.slice(close + 2).trim().split(/\s+/);
  // rest[0] is field 3 (state); field N is rest[N - 3].
  const state = rest[0];
  const pgrp = rest[2];
  const start = rest[19];
  if (state === undefined || start === undefined || pgrp === undefined || !/^\d+$/.test(start)) return undefined;
  return { state, startTimeTicks: start, pgrp: Number(pgrp) };
}

/** The stat of a live pid, or undefined when it does not exist. */
export async function readPidStat(pid: number, procRoot = "/proc"): Promise<PidStat | undefined> {
  try {
    return parsePidStat(await readFile(`${procRoot}/${String(pid)}/stat`, "utf8"));
  } catch {
    return undefined;
  }
}

/**
 * True when `pid` runs and is the same process as when its start time was
 * recorded (a recycled pid has another start time). A zombie counts as gone: it
 * holds no memory and only waits for its parent to reap it.
 */
export async function isSameProcessAlive(pid: number, startTimeTicks: string, procRoot = "/proc"): Promise<boolean> {
  const st = await readPidStat(pid, procRoot);
  return st !== undefined && st.state !== "Z" && st.state !== "X" && st.startTimeTicks === startTimeTicks;
}

/** Bytes of /proc/<pid>/environ read at most: the agent's mark comes first in its children's environment. */
export const maxEnvironBytes = 64 * 1024;

/**
 * The first `maxEnvironBytes` of /proc/<pid>/environ (NUL-separated), or
 * undefined when it cannot be read (gone, or another user's process: EACCES).
 */
export async function readEnviron(pid: number, procRoot = "/proc"): Promise<string | undefined> {
  let fh;
  try {
    fh = await open(`${procRoot}/${String(pid)}/environ`, "r");
    const buf = Buffer.alloc(maxEnvironBytes);
    let n = 0;
    // /proc files come in pieces: read until EOF or the cap
    for (;;) {
      const r = await fh.read(buf, n, buf.length - n, null);
      if (r.bytesRead === 0) break;
      n += r.bytesRead;
      if (n >= buf.length) break;
    }
    return buf.subarray(0, n).toString("utf8");
  } catch {
    return undefined;
  } finally {
    await fh?.close().catch(() => {});
  }
}

/** Resident set size of a pid in bytes (VmRSS), 0 when unknown. */
export async function readRssBytes(pid: number, procRoot = "/proc"): Promise<number> {
  try {
    const text = await readFile(`${procRoot}/${String(pid)}/status`, "utf8");
    const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(text);
    return m === null ? 0 : Number(m[1]) * 1024;
  } catch {
    return 0;
  }
}

/** Node RAM from /proc/meminfo: total and used (total − available), in bytes. */
export interface RamInfo {
  totalBytes: number;
  usedBytes: number;
}

export function parseMeminfo(text: string): RamInfo {
  const kb = (key: string): number | undefined => {
    const m = new RegExp(`^${key}:\\s+(\\d+)\\s+kB`, "m").exec(text);
    return m === null ? undefined : Number(m[1]) * 1024;
  };
  const total = kb("MemTotal") ?? 0;
  const available = kb("MemAvailable") ?? (kb("MemFree") ?? 0) + (kb("Cached") ?? 0) + (kb("Buffers") ?? 0);
  return { totalBytes: total, usedBytes: Math.max(0, total - available) };
}

export async function readMeminfo(procRoot = "/proc"): Promise<RamInfo> {
  try {
    return parseMeminfo(await readFile(`${procRoot}/meminfo`, "utf8"));
  } catch {
    return { totalBytes: 0, usedBytes: 0 };
  }
}

/** A listening TCP socket from /proc/net/tcp or tcp6. */
export interface ListeningSocket {
  port: number;
  inode: string;
}

/** Parses /proc/net/tcp{,6}: sockets in state 0A (LISTEN) with their local port and inode. */
export function parseProcNetTcp(text: string): ListeningSocket[] {
  const out: ListeningSocket[] = [];
  for (const line of text.split("\n").slice(1)) {
    const f = line.trim().split(/\s+/);
    const local = f[1];
    const state = f[3];
    const inode = f[9];
    if (local === undefined || state !== "0A" || inode === undefined || inode === "0") continue;
    const port = parseInt(local.slice(local.lastIndexOf(":") + 1), 16);
    if (Number.isFinite(port)) out.push({ port, inode });
  }
  return out;
}

/** Listening sockets whose port lies in [min, max]. */
export async function listeningSocketsInRange(min: number, max: number, procRoot = "/proc"): Promise<ListeningSocket[]> {
  const out: ListeningSocket[] = [];
  for (const f of ["tcp", "tcp6"]) {
    try {
      for (const s of parseProcNetTcp(await readFile(`${procRoot}/net/${f}`, "utf8"))) if (s.port >= min && s.port <= max) out.push(s);
    } catch {
      // tcp6 may be absent
    }
  }
  return out;
}

/**
 * Maps socket inodes to the pids holding them, by reading /proc/<pid>/fd links
 * (`socket:[inode]`). Processes we may not inspect are skipped.
 */
export async function pidsForSocketInodes(inodes: ReadonlySet<string>, procRoot = "/proc"): Promise<Map<string, number>> {
  const found = new Map<string, number>();
  if (inodes.size === 0) return found;
  let pids: string[];
  try {
    pids = (await readdir(procRoot)).filter((d) => /^\d+$/.test(d));
  } catch {
    return found;
  }
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = await readdir(`${procRoot}/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(await readlink(`${procRoot}/${pid}/fd/${fd}`));
        if (m?.[1] !== undefined && inodes.has(m[1]) && !found.has(m[1])) found.set(m[1], Number(pid));
      } catch {
        // fd closed meanwhile
      }
    }
    if (found.size === inodes.size) break;
  }
  return found;
}
