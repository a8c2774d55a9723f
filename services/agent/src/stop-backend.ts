import type { MessageInitShape } from "@bufbuild/protobuf";
import { deadlineSignal, invalidArgument, raceSignal } from "@warden/common";
import type { ServiceImpl } from "@warden/grpc";
import type { AgentService, StopBackendResponseSchema } from "@warden/proto";
import { recordOf, type AgentContext } from "./agent-context.js";
import { budgetBeforeCallerDeadlineMs } from "./caller-deadline.js";
import { checkAddress, checkIncarnation, checkText } from "./request-validation.js";

type StopResponseInit = MessageInitShape<typeof StopBackendResponseSchema>;

/**
 * StopBackend: records the stop request durably, then stops the process under
 * the model's exclusive lock (held until the reap). The escalation itself
 * (SIGTERM, grace, SIGKILL of the group) is the BackendProcess's.
 */
export function createStopBackend(ctx: AgentContext): ServiceImpl<typeof AgentService>["stopBackend"] {
  const { config, clock, logger, records, locks, table, starts } = ctx;
  return async (req, callCtx): Promise<StopResponseInit> => {
    const incarnation = checkIncarnation("incarnation", req.incarnation);
    const address = checkAddress("address", req.address);
    const reason = checkText("reason", req.reason, 256);
    ctx.fence.check(req.leaderEpoch);
    const stopped = (o: { exitCode: number | null; signal: string; escalated: boolean }): StopResponseInit => ({
      outcome: { case: "stopped", value: { exitCode: o.exitCode ?? undefined, signal: o.signal, escalated: o.escalated } },
    });
    const alreadyGone = (): StopResponseInit => ({ outcome: { case: "alreadyGone", value: { replacedBy: table.liveOnAddress(address)?.id.incarnation ?? "" } } });

    /** Decides and acts in one synchronous step; returns undefined when the model lock is needed first. */
    const decide = (haveLock: boolean): Promise<StopResponseInit> | StopResponseInit | undefined => {
      const proc = table.get(incarnation);
      if (proc === undefined) {
        const s = starts.get(incarnation);
        // A start still before spawn holds the model lock: wait for it like any stop.
        if (!haveLock && s !== undefined && !s.log.terminal()) return undefined;
        return alreadyGone();
      }
      if (proc.id.address !== address) throw invalidArgument("address", `incarnation ${incarnation} listens on ${proc.id.address}, not ${address}`);
      if (proc.noteStopRequested({ incarnation, reason, atMs: clock.wallNow() })) ctx.persist(proc);
      const phase = proc.state();
      if (phase.t === "exited") {
        const holder = table.liveOnAddress(address);
        if (holder !== undefined) return { outcome: { case: "alreadyGone", value: { replacedBy: holder.id.incarnation } } };
        return stopped({ exitCode: phase.exit.exitCode, signal: phase.exit.signal, escalated: phase.escalated });
      }
      if (phase.t === "stopping") return proc.stop(req.force).then(stopped);
      if (!haveLock) return undefined;
      logger.info("stopping backend", { incarnation, model: proc.id.model, pid: proc.pid, force: req.force, reason });
      return proc.stop(req.force).then(stopped);
    };

    // The whole request is valid: the epoch goes on disk before anything is acted on.
    await ctx.fence.admit(req.leaderEpoch);
    ctx.fence.check(req.leaderEpoch);
    // Record the stop request durably before anything else happens to the process.
    const known = table.get(incarnation);
    if (known !== undefined && known.id.address === address && known.noteStopRequested({ incarnation, reason, atMs: clock.wallNow() })) {
      await records.write(recordOf(known)).catch((err: unknown) => {
        logger.error("cannot write backend record", { incarnation, err });
      });
    }
    const first = decide(false);
    if (first !== undefined) return raceSignal(Promise.resolve(first), callCtx.signal);
    const model = table.get(incarnation)?.id.model ?? starts.get(incarnation)?.model ?? "";
    // Give up on the lock a little before the caller's deadline, so the caller
    // receives the lock error (the message the coordinator matches) rather than
    // its own transport's bare DEADLINE_EXCEEDED.
    const lockWaitMs = callCtx.deadlineAtMs === undefined ? config.stopDeadlineMs : budgetBeforeCallerDeadlineMs(callCtx.deadlineAtMs - Date.now());
    const lockDl = deadlineSignal(clock, lockWaitMs, "stop lock", callCtx.signal);
    const release = await locks.acquire(model, "exclusive", lockDl.signal).finally(() => { lockDl.cleanup(); });
    let result: Promise<StopResponseInit>;
    try {
      result = Promise.resolve(decide(true) ?? alreadyGone());
    } catch (err) {
      release();
      throw err;
    }
    // The lock is held until the reap, whether or not the caller waits for it.
    void result.finally(release).catch(() => {});
    return raceSignal(result, callCtx.signal);
  };
}
