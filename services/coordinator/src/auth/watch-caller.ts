import type { HandlerContext } from "@warden/grpc";

/**
 * Whom a WatchEvents stream is counted against for the per-caller cap: the
 * peer's host (its port changes with every connection, so one client opening
 * many connections is still one caller). One small function, so that once
 * callers authenticate it can return the token's or certificate's identity
 * instead.
 */
export function watchCallerOf(ctx: Pick<HandlerContext, "peer">): string {
  const peer = ctx.peer.replace(/^ipv[46]:/, "");
  const colon = peer.lastIndexOf(":");
  // "host:port" or "[v6]:port" → host; anything else (e.g. "in-process") as is.
  return colon > 0 && /^\d+$/.test(peer.slice(colon + 1)) ? peer.slice(0, colon).replace(/^\[(.*)\]$/, "$1") : peer;
}
