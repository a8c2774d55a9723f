import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, WardenError, invalidArgument } from "@warden/common";
import { createClient, type ServiceImpl } from "@warden/grpc";
import { Backend, type AgentService, type FreeBackendResponseSchema } from "@warden/proto";
import type { AgentContext } from "./agent-context.js";
import { backendClientTls } from "./backend-client-tls.js";
import { budgetBeforeCallerDeadlineMs } from "./caller-deadline.js";
import { fenceJudges } from "./leader-fence.js";
import { checkAddress, checkIncarnation, checkText } from "./request-validation.js";

type FreeResponseInit = MessageInitShape<typeof FreeBackendResponseSchema>;

/** The backend's message in a Freed answer or an error is cut here: it is the backend's text, not ours. */
const maxBackendMessageChars = 1_024;

/**
 * FreeBackend: the graceful stop's Free, sent by this agent to a backend it
 * started (or adopted), never by the coordinator. The request is validated
 * whole and its leader epoch admitted (on disk) before anything reaches the
 * backend; the fence is checked again in the same turn as the call is sent,
 * so a newer leader's command that arrived meanwhile refuses it (no
 * read-then-act across the write). The call is bounded by the caller's
 * deadline (else the agent's `freeTimeout`); the backend's answer is returned
 * as it came.
 */
export function createFreeBackend(ctx: AgentContext): ServiceImpl<typeof AgentService>["freeBackend"] {
  const { config, logger, table } = ctx;
  return async (req, callCtx): Promise<FreeResponseInit> => {
    const incarnation = checkIncarnation("incarnation", req.incarnation);
    const address = checkAddress("address", req.address);
    checkText("requested_by", req.requestedBy, 256);
    // Planted bug "free-past-fence" (simulation only) skips the fence here.
    const judged = fenceJudges("free");
    if (judged) {
      ctx.fence.check(req.leaderEpoch);
      await ctx.fence.admit(req.leaderEpoch);
      ctx.fence.check(req.leaderEpoch);
    }
    const proc = table.get(incarnation);
    const phase = proc?.state().t;
    if (proc === undefined || phase === "stopping" || phase === "exited") {
      return { outcome: { case: "alreadyGone", value: { replacedBy: table.liveOnAddress(address)?.id.incarnation ?? "" } } };
    }
    if (proc.id.address !== address) throw invalidArgument("address", `incarnation ${incarnation} listens on ${proc.id.address}, not ${address}`);
    // A load still running holds the model the coordinator's stop waits for; freeing it now would race the load.
    if (phase !== "ready") throw new WardenError(Code.FailedPrecondition, `incarnation ${incarnation} is ${phase ?? "unknown"}, not ready: nothing freed`);
    // The caller's deadline is the coordinator's Free cap (its `stop.freeTimeout`): the agent answers a little
    // before it, so the caller gets the typed outcome. Without one, the agent's own `freeTimeout` bounds it.
    const timeoutMs = callCtx.deadlineAtMs === undefined ? config.freeTimeoutMs : Math.max(1, budgetBeforeCallerDeadlineMs(callCtx.deadlineAtMs - Date.now()));
    const entry = Object.hasOwn(config.catalog, proc.id.backend) ? config.catalog[proc.id.backend] : undefined;
    const client = createClient(Backend, address, { ...backendClientTls(entry), ...(ctx.backendAuth === undefined ? {} : { headers: ctx.backendAuth.headers }) });
    logger.info("freeing backend", { incarnation, model: proc.id.model, pid: proc.pid, timeoutMs });
    try {
      const r = await client.free({}, { signal: AbortSignal.any([callCtx.signal, ctx.closing]), timeoutMs });
      const message = r.message.slice(0, maxBackendMessageChars);
      // LocalAI's convention: success=false with a message is a failure; an empty message is not.
      if (!r.success && message !== "") throw new WardenError(Code.Internal, `Free of ${incarnation} at ${address}: ${message}`);
      return { outcome: { case: "freed", value: { message } } };
    } catch (err) {
      const e = WardenError.from(err);
      if (e.code === Code.Unimplemented) return { outcome: { case: "unsupported", value: {} } };
      if (e.rawMessage.startsWith(`Free of ${incarnation}`)) throw e;
      throw new WardenError(e.code, `Free of ${incarnation} at ${address}: ${e.rawMessage.slice(0, maxBackendMessageChars)}`, { cause: err });
    } finally {
      client.close();
    }
  };
}
