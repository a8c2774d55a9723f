import type { MessageInitShape } from "@bufbuild/protobuf";
import { AbortLatch, permissionDenied, throwIfAborted } from "@warden/common";
import type { HandlerContext } from "@warden/grpc";
import type { HeartbeatRequest, HeartbeatResponseSchema } from "@warden/proto";
import type { TurnBudget } from "./turn-budget.js";

export interface HeartbeatStreamDeps {
  /** The node the stream's credentials are bound to (a node token's node); undefined: none (auth off). */
  readonly boundNodeOf: (ctx: HandlerContext) => string | undefined;
  /** One heartbeat as the unary Heartbeat handles it (validation, fencing, the registry). */
  readonly beat: (req: HeartbeatRequest, ctx: HandlerContext) => MessageInitShape<typeof HeartbeatResponseSchema>;
  /** Shared by every stream: heartbeats that arrive together are answered over several turns of the event loop. */
  readonly budget?: TurnBudget;
  /** A heartbeat must wait for its turn: its node is heard from now, not when it is applied (NodeTable.arrived). */
  readonly arrived?: (req: HeartbeatRequest) => void;
}

/**
 * NodeService.HeartbeatStream: the agent's heartbeats on one stream, each
 * answered in order exactly as a unary Heartbeat (same validation, boot-epoch
 * and sequence fencing, registry). The stream's credentials were checked once
 * when it opened (the admission check); here every message must name the node
 * they are bound to — or, without auth, the node the first message named —
 * else the stream ends PERMISSION_DENIED naming node_id and that message
 * changes nothing. A refused heartbeat (bad input) ends the stream with its
 * error, as it fails the unary call; the agent opens another. The loop waits on
 * the call's signal as well as the next message: a revoked token
 * (revocable-streams.ts) ends a stream that is idle between heartbeats.
 */
export async function* heartbeatStream(requests: AsyncIterable<HeartbeatRequest>, ctx: HandlerContext, deps: HeartbeatStreamDeps): AsyncIterable<MessageInitShape<typeof HeartbeatResponseSchema>> {
  let bound = deps.boundNodeOf(ctx);
  const it = requests[Symbol.asyncIterator]();
  // One abort listener for the stream, reaching only the wait in progress: a promise raced by every
  // request would keep each answered heartbeat, and a listener added and removed per request costs more than the wait.
  const aborted = new AbortLatch(ctx.signal);
  try {
    for (;;) {
      const next = await aborted.race(it.next());
      if (next.done === true) return;
      const req = next.value;
      bound ??= req.nodeId;
      if (req.nodeId !== bound) throw permissionDenied("node_id", `this stream speaks for node "${bound.slice(0, 128)}", not ${JSON.stringify(req.nodeId.slice(0, 128))}`);
      let later = deps.budget?.wait();
      // Held by this coordinator's backlog, not silent: the node's silence does not grow while it waits.
      if (later !== undefined) deps.arrived?.(req);
      for (; later !== undefined; later = deps.budget?.wait()) {
        await later;
        // Ended or revoked while it waited for its turn: not applied.
        throwIfAborted(ctx.signal);
      }
      yield deps.budget === undefined ? deps.beat(req, ctx) : deps.budget.run(() => deps.beat(req, ctx));
    }
  } finally {
    aborted.close();
    // Not awaited: with a read pending (the stream ended while idle) the request side's return waits for it.
    void it.return?.().catch(() => undefined);
  }
}
