import type { HeartbeatRequest } from "@warden/proto";
import { peerIdentity, type HandlerContext } from "@warden/grpc";
import { Code, WardenError } from "@warden/common";
import type { AgentAddressProbe } from "./agent-address-probe.js";
import type { NodeServiceImpl } from "../nodes/node-service.js";

/** The peer of the coordinator's own in-process calls (the embedded agent): no socket, no certificate. */
const inProcessPeer = "in-process";

/**
 * With mutual TLS, an agent speaks only for the node its certificate names
 * (`urn:warden:node:<id>`, from `warden certs issue agent <id>`), as a
 * kubelet acts only for its own node: a Register or Heartbeat for any other
 * node id (a HeartbeatStream's every message, a FindPeers), or from a certificate that names no node, is PERMISSION_DENIED
 * naming node_id, before anything is applied.
 */
export function checkNodeCertificate(nodeId: string, ctx: HandlerContext): void {
  if (ctx.peer === inProcessPeer) return;
  const id = peerIdentity(ctx);
  if (id?.nodeId === nodeId) return;
  const why = id === undefined ? "the call presented no client certificate" : id.nodeId === undefined ? `its certificate (CN "${id.commonName}") names no node` : `its certificate is issued to node "${id.nodeId}"`;
  throw new WardenError(Code.PermissionDenied, `node_id: "${nodeId}" refused: ${why}; an agent may only register and heartbeat as the node id in its certificate`, { details: { field: "node_id" } });
}

/**
 * The certificate check of each HeartbeatStream message, for NodeServiceOptions.streamCheck
 * under mutual TLS: the stream decodes its messages in their turn (heartbeat-stream.ts), so
 * the check runs there, after each is decoded and before anything of it is applied.
 */
export function nodeCertificateStreamCheck(req: HeartbeatRequest, ctx: HandlerContext): void {
  checkNodeCertificate(req.nodeId, ctx);
}

/**
 * NodeService with every Register and Heartbeat (and FindPeers) checked
 * against the caller's certificate first (when `mutual`), and a remote
 * Register's address against the certificate it serves (`probeAddress`,
 * agent-address-probe.ts): both before anything is applied, so a refused
 * Register changes nothing. HeartbeatStream's messages are checked by the
 * stream itself (nodeCertificateStreamCheck).
 */
export function withNodeCertificateCheck(impl: NodeServiceImpl, mutual: boolean, probeAddress?: AgentAddressProbe): NodeServiceImpl {
  if (!mutual) return impl;
  return {
    // async: a refusal is a rejected promise (the call's status), never a synchronous throw.
    async register(req, ctx) {
      checkNodeCertificate(req.nodeId, ctx);
      if (probeAddress !== undefined && ctx.peer !== inProcessPeer) await probeAddress(req.address, req.nodeId, ctx.signal);
      return impl.register(req, ctx);
    },
    async heartbeat(req, ctx) {
      checkNodeCertificate(req.nodeId, ctx);
      return impl.heartbeat(req, ctx);
    },
    async *findPeers(req, ctx) {
      checkNodeCertificate(req.nodeId, ctx);
      yield* impl.findPeers(req, ctx);
    },
    // Each message checked by the stream once decoded (nodeCertificateStreamCheck, given as streamCheck).
    heartbeatStream: (requests, ctx) => impl.heartbeatStream(requests, ctx),
  };
}
