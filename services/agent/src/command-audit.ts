import { AgentService } from "@warden/proto";
import { guardService, type ServiceImpl } from "@warden/grpc";
import type { Logger } from "@warden/common";
import { callerOf, describeCaller } from "./caller-identity.js";

/** The AgentService methods that change what runs on the node: each call is logged with who asked. */
const commands = new Set(["StartBackend", "StopBackend", "StopOrphan", "FreeBackend", "InstallBundle", "RemoveBundle"]);

/** Longer strings are cut in the log line: the request is not validated yet, and a line must stay small. */
const maxLoggedChars = 256;

/** The request fields worth an audit line (never options or environment: they may hold secrets). */
function summary(input: unknown): Record<string, unknown> {
  if (typeof input !== "object" || input === null) return {};
  const r = input as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const k of ["incarnation", "model", "backend", "address", "pid", "force", "reason", "leaderEpoch", "requestedBy"]) {
    const v = r[k];
    if (v === undefined || v === "") continue;
    out[k] = typeof v === "bigint" ? v.toString() : typeof v === "string" ? v.slice(0, maxLoggedChars) : v;
  }
  return out;
}

/**
 * Logs every command ("agent command", info) with the caller's identity
 * (caller-identity.ts) and what it asked for, before the handler runs: the
 * agent's own record of who started or stopped what, whether the call came
 * over mutual TLS, plaintext, or in process from the coordinator's embedded
 * agent. Refused callers never get here (coordinator-only.ts logs those).
 */
export function withCommandAudit(impl: ServiceImpl<typeof AgentService>, logger: Logger): ServiceImpl<typeof AgentService> {
  return guardService(AgentService, impl, (m, ctx, input) => {
    if (!commands.has(m.name)) return;
    logger.info("agent command", { method: m.name, caller: describeCaller(callerOf(ctx)), peer: ctx.peer, ...summary(input) });
  });
}
