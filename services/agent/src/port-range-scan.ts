import { Code, WardenError, invalidArgument, type Cancel, type Clock, type Logger } from "@warden/common";
import type { ServiceImpl } from "@warden/grpc";
import type { AgentService } from "@warden/proto";
import type { AgentConfig } from "./agent-config.js";
import type { PartialRecord } from "./backend-record.js";
import type { BackendTable } from "./backend-table.js";
import type { LeaderFence } from "./leader-fence-store.js";
import { scanPortRange, type Foreign, type Orphan } from "./orphan-scan.js";
import { stopOrphanProcess } from "./orphan-stop.js";
import { classifyEnviron, type AgentMark } from "./process-mark.js";
import { readEnviron } from "./proc-fs.js";
import { checkText } from "./request-validation.js";

export interface PortRangeScanDeps {
  config: AgentConfig;
  clock: Clock;
  logger: Logger;
  mark: AgentMark;
  procRoot: string;
  table: BackendTable;
  /** StopOrphan is a mutating command: it passes the leader-epoch fence. */
  fence: LeaderFence;
  /** The agent's lifetime: no scan is scheduled once it aborts. */
  closing: AbortSignal;
}

/**
 * The port-range scan and what it found: orphans (processes carrying this
 * agent's mark that it has no record of) and foreign processes (everything else
 * listening in the range), rescanned every orphanScanIntervalMs and on demand.
 * The one owner of those lists and of the ports they hold.
 */
export class PortRangeScan {
  /** Ports held by processes the agent does not own, as of the last scan. */
  private heldPorts: ReadonlySet<number> = new Set();
  /** Records that could not be trusted (kept by adoption while their pid lives); a live marked pid named by one is an orphan with its model. */
  private partials: PartialRecord[] = [];
  private orphanList: Orphan[] = [];
  private foreignList: Foreign[] = [];
  private cancelTimer: Cancel = () => {};

  constructor(private readonly deps: PortRangeScanDeps) {}

  /** The port allocator's `blocked`: a port held, at the last scan, by a process the agent does not own. */
  holdsPort(port: number): boolean {
    return this.heldPorts.has(port);
  }

  /** Orphans of the last scan. */
  orphans(): Orphan[] {
    return this.orphanList;
  }

  /** Foreign processes of the last scan. */
  foreign(): Foreign[] {
    return this.foreignList;
  }

  /** Adoption at agent start begins a fresh list of partial records. */
  clearPartials(): void {
    this.partials = [];
  }

  addPartial(partial: PartialRecord): void {
    this.partials.push(partial);
  }

  /** Rescans the port range now; returns the orphans. */
  async rescan(): Promise<Orphan[]> {
    const { config, logger, mark, procRoot, table } = this.deps;
    const knownPids = new Set<number>();
    const knownIncarnations = new Set<string>();
    const ownPorts = new Set<number>();
    for (const p of table.values()) {
      knownPids.add(p.pid);
      knownIncarnations.add(p.id.incarnation);
      if (p.state().t !== "exited") ownPorts.add(p.id.port);
    }
    const scan = await scanPortRange({ host: config.backendHost, portMin: config.portMin, portMax: config.portMax, mark, knownPids, knownIncarnations, ownPorts, partials: this.partials, procRoot });
    // A pid that became ours during the scan is not an orphan.
    const nowKnown = new Set([...table.values()].map((p) => p.pid));
    this.orphanList = scan.orphans.filter((o) => !nowKnown.has(o.pid));
    const before = new Set(this.foreignList.map((f) => `${String(f.pid)}@${f.address}`));
    this.foreignList = scan.foreign;
    this.heldPorts = scan.heldPorts;
    for (const f of this.foreignList) if (!before.has(`${String(f.pid)}@${f.address}`)) logger.warn("foreign process in the port range: reported, never signalled", { pid: f.pid, address: f.address, detail: f.detail });
    return this.orphanList;
  }

  /** Schedules the periodic rescan (every orphanScanIntervalMs until the agent closes). */
  schedule(): void {
    this.cancelTimer = this.deps.clock.setTimer(this.deps.config.orphanScanIntervalMs, () => {
      void this.rescan()
        .catch((err: unknown) => {
          this.deps.logger.warn("orphan scan failed", { err });
        })
        .finally(() => {
          if (!this.deps.closing.aborted) this.schedule();
        });
    });
  }

  /** Cancels the pending periodic rescan. */
  stop(): void {
    this.cancelTimer();
  }

  /** StopOrphan's last check, right before a signal: the reason to refuse, or undefined when the pid carries this agent's mark. */
  private readonly refuseUnmarked = async (pid: number): Promise<string | undefined> => {
    const v = classifyEnviron(await readEnviron(pid, this.deps.procRoot), this.deps.mark);
    return v.t === "foreign" ? v.detail : undefined;
  };

  /**
   * StopOrphan: only a pid the agent itself reports as an orphan right now
   * (rescanned here) may be signalled, and only if it still carries this
   * agent's mark right before the signal. A foreign pid is refused
   * (FAILED_PRECONDITION); anything else is alreadyGone.
   */
  readonly stopOrphan: ServiceImpl<typeof AgentService>["stopOrphan"] = async (req) => {
    const { config, clock, logger, procRoot } = this.deps;
    if (!Number.isInteger(req.pid) || req.pid <= 1) throw invalidArgument("pid", `must be a process id > 1, got ${String(req.pid)}`);
    const reason = checkText("reason", req.reason, 256);
    const { fence } = this.deps;
    fence.check(req.leaderEpoch);
    // The whole request is valid: the epoch goes on disk before anything is acted on.
    await fence.admit(req.leaderEpoch);
    fence.check(req.leaderEpoch);
    const current = await this.rescan();
    const o = current.find((x) => x.pid === req.pid && (req.address === "" || x.address === req.address));
    if (o === undefined) {
      const f = this.foreignList.find((x) => x.pid === req.pid);
      if (f !== undefined) throw new WardenError(Code.FailedPrecondition, `pid ${String(f.pid)} on ${f.address} is foreign (${f.detail}): this agent never signals a process it did not start`);
      return { outcome: { case: "alreadyGone", value: { replacedBy: "" } } };
    }
    logger.info("stopping orphan", { pid: o.pid, address: o.address, model: o.model, force: req.force, reason });
    const r = await stopOrphanProcess(o.pid, { force: req.force, graceMs: config.graceMs, clock, procRoot, verify: this.refuseUnmarked });
    this.orphanList = this.orphanList.filter((x) => x.pid !== o.pid);
    if (r === undefined) return { outcome: { case: "alreadyGone", value: { replacedBy: "" } } };
    return { outcome: { case: "stopped", value: { signal: r.signal, escalated: r.escalated } } };
  };
}
