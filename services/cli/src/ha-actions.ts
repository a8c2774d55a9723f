/** `warden ha status`. Loaded on demand by program.ts, like admin-actions.ts. */
import { toJson } from "@bufbuild/protobuf";
import { AdminService, GetHaStatusResponseSchema } from "@warden/proto";
import { bearerMetadata } from "@warden/grpc";
import { cliClient } from "./cli-client.js";
import { cliTransport } from "./cli-tls.js";
import { haStatusText } from "./render-ha.js";
import type { ActionContext, GlobalOpts } from "./action-context.js";

export async function haStatus(c: ActionContext, g: GlobalOpts): Promise<number | undefined> {
  // A standby answers GetHaStatus itself: with several --addr, the first one that answers reports its view.
  const admin = cliClient(AdminService, g, { ...cliTransport(g), ...(g.authToken === undefined ? {} : { headers: bearerMetadata(g.authToken) }) });
  try {
    const r = await admin.getHaStatus({}, { timeoutMs: c.deadline(g) });
    c.print(g.json ? JSON.stringify(toJson(GetHaStatusResponseSchema, r, { alwaysEmitImplicit: true }), null, 2) : haStatusText(r));
  } finally {
    admin.close();
  }
  return undefined;
}
