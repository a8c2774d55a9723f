import { Metadata } from "@grpc/grpc-js";
import { Code, WardenError, deadlineTimer } from "@warden/common";
import type { HandlerContext } from "@warden/grpc";

/**
 * A handler context for calling AgentService handlers in process (the
 * coordinator's embedded agent), shaped like the one the gRPC adapter builds:
 * `signal` fires on the caller's cancel (CANCELLED) or at `deadlineAtMs` (epoch
 * ms, DEADLINE_EXCEEDED), and StartBackend/StopBackend honour `deadlineAtMs`
 * exactly as a gRPC deadline.
 */
export function inProcessContext(options: { signal?: AbortSignal; deadlineAtMs?: number; peer?: string } = {}): HandlerContext {
  const ctl = new AbortController();
  const parent = options.signal;
  if (parent !== undefined) {
    if (parent.aborted) ctl.abort(parent.reason);
    else parent.addEventListener("abort", () => { ctl.abort(parent.reason); }, { once: true });
  }
  if (options.deadlineAtMs !== undefined && !ctl.signal.aborted) {
    // a finished call must not keep the process alive until its deadline
    const cancel = deadlineTimer(
      options.deadlineAtMs - Date.now(),
      () => {
        ctl.abort(new WardenError(Code.DeadlineExceeded, "call deadline exceeded"));
      },
      { unref: true },
    );
    ctl.signal.addEventListener("abort", cancel, { once: true });
  }
  return {
    signal: ctl.signal,
    metadata: new Metadata(),
    peer: options.peer ?? "in-process",
    deadlineAtMs: options.deadlineAtMs,
    responseHeader: new Metadata(),
    responseTrailer: new Metadata(),
  };
}
