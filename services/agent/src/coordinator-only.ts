import { AgentService } from "@warden/proto";
import { coordinatorUri, guardService, type ServiceImpl } from "@warden/grpc";
import { Code, WardenError, type Logger } from "@warden/common";
import { callerOf, describeCaller } from "./caller-identity.js";

/**
 * With mutual TLS the CA vouches for the coordinator, every node and every
 * operator's client certificate alike, so the CA alone would let a viewer's
 * certificate or node gpu-1 start and stop this node's backends. AgentService
 * therefore serves only a caller whose verified certificate carries the
 * coordinator identity (URI SAN `urn:warden:coordinator`, minted by `warden
 * certs` for coordinator certificates); operators go through the
 * coordinator's Admin API, whose roles apply. Each refusal is logged with
 * who was refused: an attempt to command an agent is worth an audit line.
 */
export function withCoordinatorOnly(impl: ServiceImpl<typeof AgentService>, logger: Logger): ServiceImpl<typeof AgentService> {
  return guardService(AgentService, impl, (m, ctx) => {
    const caller = callerOf(ctx);
    if (caller.t === "certificate" && caller.identity.isCoordinator) return;
    const why = refusal(caller);
    logger.warn("agent command refused", { method: m.name, caller: describeCaller(caller), peer: ctx.peer, why });
    throw new WardenError(Code.PermissionDenied, `${m.name}: refused: ${why}`);
  });
}

function refusal(caller: ReturnType<typeof callerOf>): string {
  const onlyCoordinator = `only the coordinator may command an agent (its certificate carries the URI SAN ${coordinatorUri})`;
  if (caller.t !== "certificate") return `the caller presented no client certificate; ${onlyCoordinator}`;
  const id = caller.identity;
  if (id.nodeId !== undefined) return `the caller's certificate is issued to node "${id.nodeId}"; ${onlyCoordinator}`;
  // A coordinator certificate minted before coordinators carried their identity
  // lands here: say how to replace it, since that is the likely case for an operator.
  return (
    `the caller's certificate (CN "${id.commonName}") does not carry the coordinator identity; ${onlyCoordinator}. ` +
    `Operators' client certificates reach agents through the coordinator's Admin API. A coordinator certificate made by an older \`warden certs\` lacks the identity: ` +
    `issue a new one with \`warden certs issue coordinator <name> --out <certs dir> --san <host>\` and restart the coordinator with it`
  );
}
