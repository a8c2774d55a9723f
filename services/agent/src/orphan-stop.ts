import { Code, WardenError, sleep, type Clock } from "@warden/common";
import { isSameProcessAlive, readPidStat } from "./proc-fs.js";

export interface OrphanStopOutcome {
  readonly escalated: boolean;
  readonly signal: string;
}

/**
 * Stops a process that is not the agent's child (an orphan): SIGTERM, wait up
 * to `graceMs` for it to go, then SIGKILL (force: SIGKILL at once). The
 * process is identified by pid *and* start time read before the first signal,
 * so a pid recycled meanwhile is never signalled again. Resolves
 * `undefined` when it was already gone. Not our child, so there is no exit
 * event: liveness is polled.
 *
 * `verify` (the agent's mark check: resolves the reason to refuse, or
 * undefined) runs after the start time is read and before any signal; the start time is checked again after it, so the mark
 * read belongs to the very process signalled. A process that fails it is
 * refused with FAILED_PRECONDITION and never signalled.
 */
export async function stopOrphanProcess(pid: number, options: { readonly force: boolean; readonly graceMs: number; readonly clock: Clock; readonly verify: (pid: number) => Promise<string | undefined>; readonly procRoot?: string; readonly pollMs?: number }): Promise<OrphanStopOutcome | undefined> {
  const procRoot = options.procRoot ?? "/proc";
  const pollMs = options.pollMs ?? 50;
  const st = await readPidStat(pid, procRoot);
  if (st === undefined || st.state === "Z") return undefined;
  const alive = (): Promise<boolean> => isSameProcessAlive(pid, st.startTimeTicks, procRoot);
  const refusal = await options.verify(pid);
  if (refusal !== undefined) throw new WardenError(Code.FailedPrecondition, `pid ${String(pid)} is not a process this agent started (${refusal}): never signalled`);
  if (!(await alive())) return undefined;
  const send = (sig: NodeJS.Signals): boolean => {
    try {
      process.kill(pid, sig);
      return true;
    } catch {
      return false; // gone (ESRCH) or not ours to signal (EPERM): nothing more to do with it
    }
  };
  const waitGone = async (budgetMs: number): Promise<boolean> => {
    const end = options.clock.now() + budgetMs;
    while (options.clock.now() < end) {
      if (!(await alive())) return true;
      await sleep(options.clock, pollMs);
    }
    return !(await alive());
  };
  if (!options.force) {
    if (!send("SIGTERM")) return { escalated: false, signal: "SIGTERM" };
    if (await waitGone(options.graceMs)) return { escalated: false, signal: "SIGTERM" };
  }
  if (await alive()) send("SIGKILL");
  await waitGone(5_000);
  return { escalated: !options.force, signal: "SIGKILL" };
}
