import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, WardenError, invalidArgument } from "@warden/common";
import type { ServiceImpl } from "@warden/grpc";
import type { AgentService, GetBackendLogsResponseSchema } from "@warden/proto";
import type { AgentContext } from "./agent-context.js";
import { checkIncarnation } from "./request-validation.js";

/** GetBackendLogs' lines per stream: the default when 0, and the most a caller may ask. */
export const defaultLogLines = 100;
export const maxLogLines = 1_000;

/**
 * GetBackendLogs: the last lines of one backend's stdout and stderr, read
 * from the end of the files the process writes (backend-logs.ts: the last
 * 64 KiB of each, lines cut at 4 096 characters), so an answer is bounded
 * whatever the backend wrote. A read: no fence, nothing changes.
 */
export function createGetBackendLogs(ctx: AgentContext): ServiceImpl<typeof AgentService>["getBackendLogs"] {
  return async (req): Promise<MessageInitShape<typeof GetBackendLogsResponseSchema>> => {
    const incarnation = checkIncarnation("incarnation", req.incarnation);
    if (req.maxLines > maxLogLines) throw invalidArgument("max_lines", `must be 0..${String(maxLogLines)} (0 = ${String(defaultLogLines)}), got ${String(req.maxLines)}`);
    const proc = ctx.table.get(incarnation);
    if (proc === undefined) throw new WardenError(Code.NotFound, `incarnation: no backend ${incarnation} on this node`, { details: { field: "incarnation" } });
    const t = await proc.logs.tails(req.maxLines === 0 ? defaultLogLines : req.maxLines);
    return { stdoutLines: t.stdout, stderrLines: t.stderr };
  };
}
