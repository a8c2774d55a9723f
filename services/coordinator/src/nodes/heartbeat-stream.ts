import type { MessageInitShape } from "@bufbuild/protobuf";
import { abortReason, permissionDenied } from "@warden/common";
import { decodedRequest, pushedReplies, readRequests, type HandlerContext, type PushReplies, type ReplySink, type RequestBytes, type RequestFlow } from "@warden/grpc";
import type { HeartbeatRequest, HeartbeatResponseSchema } from "@warden/proto";
import type { TurnBudget } from "./turn-budget.js";

export interface HeartbeatStreamDeps {
  /** The node the stream's credentials are bound to (a node token's node); undefined: none (auth off). */
  readonly boundNodeOf: (ctx: HandlerContext) => string | undefined;
  /** One heartbeat as the unary Heartbeat handles it (validation, fencing, the registry). */
  readonly beat: (req: HeartbeatRequest, ctx: HandlerContext) => MessageInitShape<typeof HeartbeatResponseSchema>;
  /** Shared by every stream: heartbeats that arrive together are answered over several turns of the event loop. */
  readonly budget?: TurnBudget;
  /** A heartbeat must wait for its turn: its node (of that boot) is heard from now until `released`, not only when it is applied (NodeTable.arrived). */
  readonly arrived?: (nodeId: string, bootEpoch: bigint) => void;
  /** The turn of a heartbeat `arrived` told of came (applied now, or its stream ended meanwhile): once per `arrived`. */
  readonly released?: (nodeId: string, bootEpoch: bigint) => void;
  /** Each message once decoded, before anything of it is applied (the node certificate check under mutual TLS): a throw ends the stream with it. */
  readonly check?: (req: HeartbeatRequest, ctx: HandlerContext) => void;
}

type HeartbeatAnswer = MessageInitShape<typeof HeartbeatResponseSchema>;

/** Heartbeats of one stream read ahead of their answers before the stream is paused (a pipelining client). */
const readAheadMessages = 16;

/**
 * NodeService.HeartbeatStream: the agent's heartbeats on one stream, each
 * answered in order exactly as a unary Heartbeat (same validation, boot-epoch
 * and sequence fencing, registry). The stream's credentials were checked once
 * when it opened (the admission check); here every message must name the node
 * they are bound to — or, without auth, the node the first message named —
 * and pass `check`, else the stream ends PERMISSION_DENIED naming node_id and
 * that message changes nothing. A refused heartbeat (bad input, bytes that
 * are not a heartbeat) ends the stream with its error, as it fails the unary
 * call; the agent opens another. The call's signal ends the stream at once
 * with its reason, idle or not: a revoked token (revocable-streams.ts) ends a
 * stream that is idle between heartbeats, and a heartbeat that waited for its
 * turn is not applied once the stream ended.
 *
 * Driven by events (push-stream.ts): each message is handled as it arrives and
 * answered through the reply sink; between two messages nothing is pending —
 * no promise per layer waiting a second for the next heartbeat, which outlived
 * the young generation and was promoted, per node per second. Pulled (a test),
 * it answers the same.
 *
 * Messages arrive as their bytes and are decoded in their turn: a heartbeat
 * that waits for its turn behind thousands of others waits as one buffer, not
 * as a decoded message of a few KiB of small objects that each young-generation
 * collection meanwhile copies (and promotes, if the wait is long). Its node is
 * still heard when it starts to wait (`arrived`), under the boot epoch of the
 * stream's last heartbeat (a stream is one agent process); the first message
 * of a stream, with nothing decoded before it, is decoded then for that.
 */
export function heartbeatStream(requests: AsyncIterable<RequestBytes<HeartbeatRequest>>, ctx: HandlerContext, deps: HeartbeatStreamDeps): PushReplies<HeartbeatAnswer> {
  return pushedReplies((sink) => {
    new HeartbeatAnswers(ctx, deps, sink).start(requests);
  });
}

/** One stream's state: its queue of heartbeats not yet answered, and whether one waits for its turn. */
class HeartbeatAnswers {
  private bound: string | undefined;
  /** The boot epoch of the last heartbeat decoded here (undefined before the first): what a waiting one is heard under. */
  private bootEpoch: bigint | undefined;
  /** Read, not yet answered, in order (usually none or one: an agent sends the next after the answer). */
  private readonly queue: RequestBytes<HeartbeatRequest>[] = [];
  /** The head of the queue waits for a later turn of the budget. */
  private waiting = false;
  /** The caller half-closed: end once the queue is answered. */
  private halfClosed = false;
  private closed = false;
  private flow: RequestFlow | undefined;
  /** Each made once per stream, not per message. */
  private readonly onAbort = (): void => {
    this.failWith(abortReason(this.ctx.signal));
  };
  /**
   * `arrived` was told the head of the queue waits (for `bound` under `bootEpoch`, which nothing
   * changes until its turn: only a turn decodes the messages after it).
   */
  private held = false;
  /** The budget's turn for the head of the queue (TurnBudget.defer: exactly once per deferral, even after the stream ended). */
  private readonly onTurn = (): void => {
    this.waiting = false;
    if (this.held) {
      this.held = false;
      if (this.bound !== undefined && this.bootEpoch !== undefined) this.deps.released?.(this.bound, this.bootEpoch);
    }
    this.drain();
  };

  constructor(
    private readonly ctx: HandlerContext,
    private readonly deps: HeartbeatStreamDeps,
    private readonly sink: ReplySink<HeartbeatAnswer>,
  ) {
    this.bound = deps.boundNodeOf(ctx);
  }

  start(requests: AsyncIterable<RequestBytes<HeartbeatRequest>>): void {
    const signal = this.ctx.signal;
    if (signal.aborted) {
      this.closed = true;
      this.sink.fail(abortReason(signal));
      return;
    }
    // One abort listener for the whole stream, not one per message.
    signal.addEventListener("abort", this.onAbort, { once: true });
    const flow = readRequests(requests, {
      message: (msg) => {
        this.message(msg);
      },
      end: () => {
        this.halfClosed = true;
        this.drain();
      },
      fail: (err) => {
        this.failWith(err);
      },
    });
    this.flow = flow;
    // Ended while the reading started: nothing more to read.
    if (this.closed) flow.stop();
  }

  private message(msg: RequestBytes<HeartbeatRequest>): void {
    if (this.closed) return;
    this.queue.push(msg);
    if (this.queue.length >= readAheadMessages) this.flow?.pause();
    this.drain();
  }

  /** Answers the queue in order while the turn's budget lasts; the rest waits for a later turn. */
  private drain(): void {
    while (!this.closed && !this.waiting) {
      const msg = this.queue[0];
      if (msg === undefined) {
        if (this.halfClosed) this.finish();
        return;
      }
      const { budget } = this.deps;
      if (budget !== undefined && !budget.has()) {
        this.wait(msg, budget);
        return;
      }
      this.queue.shift();
      if (this.queue.length === readAheadMessages - 1) this.flow?.resume();
      let answer: HeartbeatAnswer;
      try {
        answer = this.beat(msg);
      } catch (err) {
        this.failWith(err);
        return;
      }
      this.sink.reply(answer);
    }
  }

  /** The head of the queue waits for a later turn; its node is heard now (the coordinator's backlog is not its silence). */
  private wait(msg: RequestBytes<HeartbeatRequest>, budget: TurnBudget): void {
    this.waiting = true;
    if (this.bootEpoch === undefined) {
      // Nothing decoded on this stream yet: this one is, to know whose it is.
      try {
        this.queue[0] = decodedRequest(this.admit(msg.decode()));
      } catch (err) {
        this.failWith(err);
        return;
      }
    }
    if (this.bound !== undefined && this.bootEpoch !== undefined) {
      this.held = true;
      this.deps.arrived?.(this.bound, this.bootEpoch);
    }
    budget.defer(this.onTurn);
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

  private finish(): void {
    if (!this.close()) return;
    this.sink.end();
  }

  private failWith(err: unknown): void {
    if (!this.close()) return;
    this.sink.fail(err);
  }

  /** True the first time: stops reading and lets go of the queue and the signal. */
  private close(): boolean {
    if (this.closed) return false;
    this.closed = true;
    this.queue.length = 0;
    this.ctx.signal.removeEventListener("abort", this.onAbort);
    this.flow?.stop();
    return true;
  }
}
