import { isPlanted } from "@warden/common";
import type { PartialRecord } from "./backend-record.js";
import { classifyEnviron, type AgentMark } from "./process-mark.js";
import { listeningSocketsInRange, pidsForSocketInodes, readEnviron, readPidStat } from "./proc-fs.js";

/** A live process this agent started (it carries the agent's mark) without a complete record. */
export interface Orphan {
  pid: number;
  address: string;
  model: string;
  detail: string;
}

/**
 * The model an orphan is reported with: its partial record's, else its mark's
 * (a start killed between spawn and record), else "" (a mark from before the
 * model was in it). Shared with the simulated agent (test/sim), so a planted
 * "orphan-without-model" reaches both: an orphan without its model counts for
 * no exclusive group, and the coordinator starts the other member beside it.
 */
export function orphanModel(recordModel: string | undefined, markModel: string | undefined): string {
  if (recordModel !== undefined) return recordModel;
  if (isPlanted("orphan-without-model")) return "";
  return markModel ?? "";
}

/** A process listening in the port range that this agent did not start: reported, never signalled. */
export interface Foreign {
  /** 0 when the socket's owner could not be found (a process the agent may not inspect). */
  pid: number;
  address: string;
  detail: string;
}

/** Foreign processes reported per scan at most (the rest are still never signalled, and their ports still skipped). */
export const maxForeignReported = 256;

export interface PortScanInput {
  host: string;
  portMin: number;
  portMax: number;
  /** This agent's mark: only a process carrying it can be an orphan. */
  mark: AgentMark;
  /** Pids the agent owns (children and adopted); never orphans. */
  knownPids: ReadonlySet<number>;
  /** Incarnations the agent owns: a marked helper process of one of them (it holds the listening socket) is not an orphan. */
  knownIncarnations: ReadonlySet<string>;
  /** Ports the agent's live backends hold: a listener there whose owner cannot be found is taken to be that backend. */
  ownPorts: ReadonlySet<number>;
  /** Records that could not be trusted; a live marked pid named by one is an orphan with its model. */
  partials: readonly PartialRecord[];
  /** @default "/proc" */
  procRoot?: string;
}

export interface PortScan {
  orphans: Orphan[];
  foreign: Foreign[];
  /** Every port some process not owned by the agent listens on (foreign and orphans, beyond the report cap too). */
  heldPorts: Set<number>;
}

/**
 * Scans the agent's port range (/proc/net/tcp{,6}, socket inodes under
 * /proc/<pid>/fd) for listeners the agent does not own, and sorts each by the
 * mark in its /proc/<pid>/environ: this agent's mark → orphan; no mark, another
 * node's or another agent's mark, or an environment it cannot read → foreign.
 * Live marked pids named by partial records are orphans too. The agent's own
 * pid is never either.
 */
export async function scanPortRange(input: PortScanInput): Promise<PortScan> {
  const procRoot = input.procRoot ?? "/proc";
  const orphans = new Map<number, Orphan>();
  const foreign = new Map<string, Foreign>();
  const heldPorts = new Set<number>();
  /** Pids already sorted, and those of them that are orphans or foreign. */
  const seen = new Set<number>();
  const holders = new Set<number>();
  const partialByPid = new Map<number, PartialRecord>();
  for (const p of input.partials) if (p.pid !== undefined) partialByPid.set(p.pid, p);
  const sockets = await listeningSocketsInRange(input.portMin, input.portMax, procRoot);
  const byInode = await pidsForSocketInodes(new Set(sockets.map((s) => s.inode)), procRoot);
  // A socket whose owner was not found may belong to a process that exited
  // during the fd walk: only one still listening afterwards is reported.
  const unowned = sockets.some((s) => !byInode.has(s.inode)) ? new Set((await listeningSocketsInRange(input.portMin, input.portMax, procRoot)).map((s) => s.inode)) : new Set<string>();
  const addForeign = (key: string, f: Foreign, port: number): void => {
    heldPorts.add(port);
    if (!foreign.has(key) && foreign.size < maxForeignReported) foreign.set(key, f);
  };
  for (const s of sockets) {
    const pid = byInode.get(s.inode);
    const address = `${input.host}:${String(s.port)}`;
    if (pid === undefined) {
      if (!input.ownPorts.has(s.port) && unowned.has(s.inode)) addForeign(`0@${address}`, { pid: 0, address, detail: "listening, held by a process this agent may not inspect" }, s.port);
      continue;
    }
    if (pid === process.pid || input.knownPids.has(pid)) continue;
    if (seen.has(pid)) {
      // a second socket of a process already sorted
      if (holders.has(pid)) heldPorts.add(s.port);
      continue;
    }
    seen.add(pid);
    const verdict = classifyEnviron(await readEnviron(pid, procRoot), input.mark);
    if (verdict.t === "foreign") {
      // An environ read empty or failing because the process just exited is no sign of a stranger.
      const st = await readPidStat(pid, procRoot);
      if (st === undefined || st.state === "Z" || st.state === "X") continue;
      holders.add(pid);
      addForeign(String(pid), { pid, address, detail: verdict.detail }, s.port);
      continue;
    }
    if (verdict.incarnation !== "" && input.knownIncarnations.has(verdict.incarnation)) continue;
    holders.add(pid);
    heldPorts.add(s.port);
    const partial = partialByPid.get(pid);
    orphans.set(pid, {
      pid,
      address,
      model: orphanModel(partial?.model, verdict.model),
      detail: partial?.detail ?? "started by this agent, listening in its port range without a record",
    });
  }
  for (const p of input.partials) {
    if (p.pid === undefined || orphans.has(p.pid) || seen.has(p.pid) || input.knownPids.has(p.pid)) continue;
    const st = await readPidStat(p.pid, procRoot);
    if (st === undefined || st.state === "Z") continue;
    // A pid named by a partial record that does not carry the mark is someone
    // else's (the pid was recycled): not ours to account or signal.
    const verdict = classifyEnviron(await readEnviron(p.pid, procRoot), input.mark);
    if (verdict.t === "foreign" || (verdict.incarnation !== "" && input.knownIncarnations.has(verdict.incarnation))) continue;
    orphans.set(p.pid, { pid: p.pid, address: p.address, model: p.model, detail: p.detail });
  }
  return { orphans: [...orphans.values()], foreign: [...foreign.values()], heldPorts };
}
