import type { PartialRecord } from "./backend-record.js";
import { listeningSocketsInRange, pidsForSocketInodes, readPidStat } from "./proc-fs.js";

/** A live process without a complete record. */
export interface Orphan {
  pid: number;
  address: string;
  model: string;
  detail: string;
}

export interface OrphanScanInput {
  host: string;
  portMin: number;
  portMax: number;
  /** Pids the agent owns (children and adopted); never orphans. */
  knownPids: ReadonlySet<number>;
  /** Records that could not be trusted; a live pid named by one is an orphan with its model. */
  partials: readonly PartialRecord[];
  /** @default "/proc" */
  procRoot?: string;
}

/**
 * Finds orphans: processes listening in the agent's port range that the agent
 * does not own (found through /proc/net/tcp{,6} and socket inodes under
 * /proc/<pid>/fd), plus live pids named by partial records. The agent's own pid
 * is never one.
 */
export async function scanOrphans(input: OrphanScanInput): Promise<Orphan[]> {
  const procRoot = input.procRoot ?? "/proc";
  const out = new Map<number, Orphan>();
  const partialByPid = new Map<number, PartialRecord>();
  for (const p of input.partials) if (p.pid !== undefined) partialByPid.set(p.pid, p);
  const sockets = await listeningSocketsInRange(input.portMin, input.portMax, procRoot);
  const byInode = await pidsForSocketInodes(new Set(sockets.map((s) => s.inode)), procRoot);
  for (const s of sockets) {
    const pid = byInode.get(s.inode);
    if (pid === undefined || pid === process.pid || input.knownPids.has(pid) || out.has(pid)) continue;
    const partial = partialByPid.get(pid);
    out.set(pid, {
      pid,
      address: `${input.host}:${String(s.port)}`,
      model: partial?.model ?? "",
      detail: partial?.detail ?? "listening in the agent's port range without a record",
    });
  }
  for (const p of input.partials) {
    if (p.pid === undefined || out.has(p.pid) || input.knownPids.has(p.pid)) continue;
    const st = await readPidStat(p.pid, procRoot);
    if (st === undefined || st.state === "Z") continue;
    out.set(p.pid, { pid: p.pid, address: p.address, model: p.model, detail: p.detail });
  }
  return [...out.values()];
}
