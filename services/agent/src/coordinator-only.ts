import { AgentService } from "@warden/proto";
import { guardService, peerIdentity, type ServiceImpl } from "@warden/grpc";
import { Code, WardenError } from "@warden/common";

/**
 * With mutual TLS, every agent's certificate comes from the same CA as the
 * coordinator's, so the CA alone would let node gpu-1 start or stop gpu-2's
 * backends. AgentService therefore refuses any caller whose certificate
 * names a node (`urn:warden:node:<id>`): only the coordinator (or an
 * operator's client certificate, which names none) commands an agent.
 */
export function withCoordinatorOnly(impl: ServiceImpl<typeof AgentService>): ServiceImpl<typeof AgentService> {
  return guardService(AgentService, impl, (m, ctx) => {
    const node = peerIdentity(ctx)?.nodeId;
    if (node !== undefined) throw new WardenError(Code.PermissionDenied, `${m.name}: refused: the caller's certificate is issued to node "${node}"; only the coordinator may command an agent`);
  });
}
