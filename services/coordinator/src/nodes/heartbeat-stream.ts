import type { MessageInitShape } from "@bufbuild/protobuf";
import { AbortLatch, permissionDenied, throwIfAborted } from "@warden/common";
import { decodedRequest, type HandlerContext, type RequestBytes } from "@warden/grpc";
import type { HeartbeatRequest, HeartbeatResponseSchema } from "@warden/proto";
import type { TurnBudget } from "./turn-budget.js";

export interface HeartbeatStreamDeps {
  /** The node the stream's credentials are bound to (a node token's node); undefined: none (auth off). */
  readonly boundNodeOf: (ctx: HandlerContext) => string | undefined;
  /** One heartbeat as the unary Heartbeat handles it (validation, fencing, the registry). */
  readonly beat: (req: HeartbeatRequest, ctx: HandlerContext) => MessageInitShape<typeof HeartbeatResponseSchema>;
  /** Shared by every stream: heartbeats that arrive together are answered over several turns of the event loop. */
  readonly budget?: TurnBudget;
  /** A heartbeat must wait for its turn: its node (of that boot) is heard from now, not when it is applied (NodeTable.arrived). */
  readonly arrived?: (nodeId: string, bootEpoch: bigint) => void;
  /** Each message once decoded, before anything of it is applied (the node certificate check under mutual TLS): a throw ends the stream with it. */
  readonly check?: (req: HeartbeatRequest, ctx: HandlerContext) => void;
}

type HeartbeatAnswer = MessageInitShape<typeof HeartbeatResponseSchema>;

const ended: IteratorReturnResult<undefined> = { done: true, value: undefined };

/**
 * NodeService.HeartbeatStream: the agent's heartbeats on one stream, each
 * answered in order exactly as a unary Heartbeat (same validation, boot-epoch
 * and sequence fencing, registry). The stream's credentials were checked once
 * when it opened (the admission check); here every message must name the node
 * they are bound to — or, without auth, the node the first message named —
 * and pass `check`, else the stream ends PERMISSION_DENIED naming node_id and
 * that message changes nothing. A refused heartbeat (bad input, bytes that
 * are not a heartbeat) ends the stream with its error, as it fails the unary
 * call; the agent opens another. The wait for the next message is raced
 * against the call's signal: a revoked token (revocable-streams.ts) ends a
 * stream that is idle between heartbeats.
 *
 * Messages arrive as their bytes and are decoded in their turn, inside the
 * turn budget: a heartbeat that waits for its turn behind thousands of others
 * waits as one buffer, not as a decoded message of a few KiB of small objects
 * that each young-generation collection meanwhile copies (and promotes, if the
 * wait is long). Its node is still heard when it arrives (`arrived`), under the
 * boot epoch of the stream's last heartbeat (a stream is one agent process);
 * the first message of a stream, with nothing decoded before it, is decoded
 * on arrival for that.
 *
 * An iterator, not an async generator: a generator's suspended frame keeps the
 * last heartbeat it answered until the next one arrives — a second later, by
 * when it has outlived the young generation, so every node's every heartbeat
 * was promoted to the old one and died there. Nothing here holds a heartbeat
 * once it is answered.
 */
export function heartbeatStream(requests: AsyncIterable<RequestBytes<HeartbeatRequest>>, ctx: HandlerContext, deps: HeartbeatStreamDeps): AsyncIterable<HeartbeatAnswer> {
  return {
    [Symbol.asyncIterator]: () => new HeartbeatAnswers(requests[Symbol.asyncIterator](), ctx, deps),
  };
}

class HeartbeatAnswers implements AsyncIterator<HeartbeatAnswer> {
  private bound: string | undefined;
  /** The boot epoch of the last heartbeat decoded here (undefined before the first): what a waiting one is heard under. */
  private bootEpoch: bigint | undefined;
  private closed = false;
  // One abort listener for the stream, reaching only the wait in progress: a promise raced by every
  // request would keep each answered heartbeat, and a listener added and removed per request costs more than the wait.
  private readonly aborted: AbortLatch;
  /** Each made once per stream, not per message. */
  private readonly onRequest = (r: IteratorResult<RequestBytes<HeartbeatRequest>>): IteratorResult<HeartbeatAnswer> | Promise<IteratorResult<HeartbeatAnswer>> => {
    if (r.done === true) {
      this.close();
      return ended;
    }
    try {
      return this.answer(r.value);
    } catch (err) {
      this.close();
      throw err;
    }
  };
  private readonly onFailure = (err: unknown): never => {
    this.close();
    throw err;
  };

  constructor(
    private readonly requests: AsyncIterator<RequestBytes<HeartbeatRequest>>,
    private readonly ctx: HandlerContext,
    private readonly deps: HeartbeatStreamDeps,
  ) {
    this.bound = deps.boundNodeOf(ctx);
    this.aborted = new AbortLatch(ctx.signal);
  }

  next(): Promise<IteratorResult<HeartbeatAnswer>> {
    if (this.closed) return Promise.resolve(ended);
    return this.aborted.race(this.requests.next()).then(this.onRequest, this.onFailure);
  }

  return(): Promise<IteratorResult<HeartbeatAnswer>> {
    this.close();
    return Promise.resolve(ended);
  }

  private answer(msg: RequestBytes<HeartbeatRequest>): IteratorResult<HeartbeatAnswer> | Promise<IteratorResult<HeartbeatAnswer>> {
    const later = this.deps.budget?.wait();
    if (later === undefined) return { done: false, value: this.beat(msg) };
    // Held by this coordinator's backlog, not silent: the node's silence does not grow while it waits.
    let waiting = msg;
    if (this.bootEpoch === undefined) {
      // Nothing decoded on this stream yet: this one is, to know whose it is.
      const req = this.admit(msg.decode());
      waiting = decodedRequest(req);
    }
    if (this.bound !== undefined && this.bootEpoch !== undefined) this.deps.arrived?.(this.bound, this.bootEpoch);
    return this.afterTurns(waiting, later).catch(this.onFailure);
  }

  private async afterTurns(msg: RequestBytes<HeartbeatRequest>, first: Promise<void>): Promise<IteratorResult<HeartbeatAnswer>> {
    for (let later: Promise<void> | undefined = first; later !== undefined; later = this.deps.budget?.wait()) {
      await later;
      // Ended or revoked while it waited for its turn: not applied.
      throwIfAborted(this.ctx.signal);
    }
    return { done: false, value: this.beat(msg) };
  }

  /**
   * Decodes and admits one heartbeat, then applies it; only the applying is
   * charged to the turn, as when messages were decoded on arrival (outside the
   * budget). Charging the decoding too cut the heartbeats a turn answers while
   * the rest of the loop's work stayed the same: at 5 000 nodes on a busy
   * machine they then fell behind their arrivals (a backlog, not a shorter turn).
   */
  private beat(msg: RequestBytes<HeartbeatRequest>): HeartbeatAnswer {
    const req = this.admit(msg.decode());
    const { budget } = this.deps;
    return budget === undefined ? this.deps.beat(req, this.ctx) : budget.run(() => this.deps.beat(req, this.ctx));
  }

  /** The stream's own checks of a decoded heartbeat, before anything of it is applied. */
  private admit(req: HeartbeatRequest): HeartbeatRequest {
    this.bound ??= req.nodeId;
    if (req.nodeId !== this.bound) throw permissionDenied("node_id", `this stream speaks for node "${this.bound.slice(0, 128)}", not ${JSON.stringify(req.nodeId.slice(0, 128))}`);
    this.deps.check?.(req, this.ctx);
    // Only when it changes: the stream outlives its heartbeats, and a new bigint kept here each time would outlive the young generation.
    if (this.bootEpoch !== req.bootEpoch) this.bootEpoch = req.bootEpoch;
    return req;
  }

  private close(): void {
    if (this.closed) return;
    this.closed = true;
    this.aborted.close();
    // Not awaited: with a read pending (the stream ended while idle) the request side's return waits for it.
    void this.requests.return?.().catch(() => undefined);
  }
}
