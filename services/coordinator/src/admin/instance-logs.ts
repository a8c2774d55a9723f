import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, WardenError, invalidArgument } from "@warden/common";
import type { GetInstanceLogsRequest, GetInstanceLogsResponseSchema } from "@warden/proto";
import type { Loader } from "@warden/loader";
import type { BackendClientHandle } from "../routing/backend-connector.js";
import type { NodeRegistry } from "../nodes/node-registry.js";
import { checkId } from "./check-id.js";

/** Lines per stream a caller may ask for (the agent's own cap); 0 = the agent's default, 100. */
export const maxInstanceLogLines = 1_000;
/** How long the agent may take to read two bounded file tails. */
const logsTimeoutMs = 10_000;

/**
 * GetInstanceLogs: the instance's node and model from the loader, its
 * backend's last lines from the node's agent (AgentService.GetBackendLogs,
 * bounded there). Nothing changes anywhere.
 */
export async function instanceLogs(d: { readonly loader: Loader<BackendClientHandle>; readonly nodes: NodeRegistry }, req: GetInstanceLogsRequest, signal: AbortSignal): Promise<MessageInitShape<typeof GetInstanceLogsResponseSchema>> {
  const incarnation = checkId(req.incarnation, "incarnation");
  if (req.maxLines > maxInstanceLogLines) throw invalidArgument("max_lines", `must be 0..${String(maxInstanceLogLines)} (0 = 100), got ${String(req.maxLines)}`);
  const view = d.loader.core.instance(incarnation);
  const nodeId = d.loader.nodeOf(incarnation);
  if (nodeId === undefined) throw new WardenError(Code.NotFound, `incarnation: no instance ${incarnation} is held by this coordinator`, { details: { field: "incarnation" } });
  const node = d.nodes.get(nodeId);
  if (node === undefined) throw new WardenError(Code.Unavailable, `node "${nodeId}" of instance ${incarnation} is not registered; its logs are on that node`);
  const r = await node.client.getBackendLogs({ incarnation, maxLines: req.maxLines }, { signal, timeoutMs: logsTimeoutMs }).catch((err: unknown) => {
    const e = WardenError.from(err);
    if (e.code === Code.Unimplemented) throw new WardenError(Code.Unimplemented, `the agent on node "${nodeId}" is older than GetBackendLogs; upgrade it to read backend logs`);
    throw e;
  });
  return { model: view?.model ?? "", nodeId, stdoutLines: r.stdoutLines, stderrLines: r.stderrLines };
}
