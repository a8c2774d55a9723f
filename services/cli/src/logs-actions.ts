/** `warden logs <instance>`. Loaded on demand by program.ts, like admin-actions.ts. */
import { toJson } from "@bufbuild/protobuf";
import { AdminService, GetInstanceLogsResponseSchema } from "@warden/proto";
import { bearerMetadata } from "@warden/grpc";
import { invalidArgument } from "@warden/common";
import { cliClient } from "./cli-client.js";
import { cliTransport } from "./cli-tls.js";
import type { ActionContext, GlobalOpts } from "./action-context.js";

const ulid = /^[0-9A-HJKMNP-TV-Z]{26}$/i;

/**
 * The last lines of an instance's backend stdout and stderr (GetInstanceLogs;
 * operator role). `instance` is an incarnation, or a model with exactly one
 * instance (several: refused, listing them).
 */
export async function instanceLogs(c: ActionContext, g: GlobalOpts, instance: string, lines: string): Promise<number | undefined> {
  if (!/^[0-9]{1,4}$/.test(lines) || Number(lines) < 1 || Number(lines) > 1_000) throw invalidArgument("--lines", `a whole number 1..1000, got "${lines.slice(0, 32)}"`);
  const admin = cliClient(AdminService, g, { ...cliTransport(g), ...(g.authToken === undefined ? {} : { headers: bearerMetadata(g.authToken) }) });
  try {
    let incarnation = instance;
    if (!ulid.test(instance)) {
      const listed = (await admin.listModels({ model: instance, pageSize: 100 }, { timeoutMs: c.deadline(g) })).instances;
      const only = listed[0];
      if (only === undefined) throw invalidArgument("instance", `"${instance.slice(0, 64)}" is neither an incarnation nor a model with an instance`);
      if (listed.length > 1) throw invalidArgument("instance", `model ${instance} has ${String(listed.length)} instances; name one: ${listed.map((i) => `${i.incarnation} (${i.nodeId})`).join(", ")}`);
      incarnation = only.incarnation;
    }
    const r = await admin.getInstanceLogs({ incarnation, maxLines: Number(lines) }, { timeoutMs: c.deadline(g) });
    if (g.json) {
      c.print(JSON.stringify(toJson(GetInstanceLogsResponseSchema, r, { alwaysEmitImplicit: true }), null, 2));
      return undefined;
    }
    const block = (name: string, l: readonly string[]): string => `== ${name} of ${r.model} (${incarnation}) on ${r.nodeId}: last ${String(l.length)} lines ==\n${l.join("\n")}`;
    c.print(`${block("stderr", r.stderrLines)}\n${block("stdout", r.stdoutLines)}`);
  } finally {
    admin.close();
  }
  return undefined;
}
