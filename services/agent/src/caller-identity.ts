import { peerIdentity, type HandlerContext, type PeerIdentity } from "@warden/grpc";

/**
 * Who sent an AgentService call, as the agent logs it and as its refusals
 * name it: the verified client certificate (mutual TLS), the coordinator's
 * own embedded agent (an in-process call has no socket), or a peer that
 * proved nothing (plaintext or TLS without client certificates).
 */
export type Caller =
  | { readonly t: "certificate"; readonly identity: PeerIdentity }
  | { readonly t: "in-process" }
  | { readonly t: "unauthenticated"; readonly peer: string };

/** The peer string inProcessContext gives an in-process call (in-process-context.ts). */
const inProcessPeer = "in-process";

export function callerOf(ctx: HandlerContext): Caller {
  const identity = peerIdentity(ctx);
  if (identity !== undefined) return { t: "certificate", identity };
  return ctx.peer === inProcessPeer ? { t: "in-process" } : { t: "unauthenticated", peer: ctx.peer };
}

/** One line naming the caller: `coordinator (CN "x")`, `node "gpu-1" (CN "gpu-1")`, `certificate (CN "viewer")`, `in-process`, `unauthenticated 127.0.0.1:5000`. */
export function describeCaller(c: Caller): string {
  switch (c.t) {
    case "in-process":
      return "in-process";
    case "unauthenticated":
      return `unauthenticated ${c.peer}`;
    case "certificate": {
      const cn = `CN ${JSON.stringify(c.identity.commonName)}`;
      if (c.identity.isCoordinator) return `coordinator (${cn})`;
      if (c.identity.nodeId !== undefined) return `node ${JSON.stringify(c.identity.nodeId)} (${cn})`;
      return `certificate (${cn})`;
    }
  }
}
