import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, WardenError, isNotLeader, nullLogger, type Logger } from "@warden/common";
import type { CallOptions } from "@warden/grpc";
import type { HeartbeatRequestSchema, HeartbeatResponse } from "@warden/proto";
import type { NodeCallOptions } from "./node-heartbeat.js";

type HeartbeatInit = MessageInitShape<typeof HeartbeatRequestSchema>;

/** The two ways to send a heartbeat: NodeService.HeartbeatStream and the unary Heartbeat. */
export interface HeartbeatCalls {
  /** Opens a HeartbeatStream sending `requests` (a client's `heartbeatStream`). */
  stream(requests: AsyncIterable<HeartbeatInit>, options: CallOptions): AsyncIterable<HeartbeatResponse>;
  unary(request: HeartbeatInit, options: CallOptions): Promise<HeartbeatResponse>;
}

export interface StreamedHeartbeatsOptions {
  readonly calls: HeartbeatCalls;
  /** Added to every call (the stream's and unary ones): e.g. a bearer token's metadata. */
  readonly callOptions?: Pick<CallOptions, "metadata">;
  readonly logger?: Logger;
}

/** Requests written one at a time into an open stream; end() finishes its request side. */
class RequestQueue implements AsyncIterable<HeartbeatInit> {
  private readonly items: HeartbeatInit[] = [];
  private wake: (() => void) | undefined;
  private ended = false;

  push(r: HeartbeatInit): void {
    this.items.push(r);
    this.notify();
  }

  end(): void {
    this.ended = true;
    this.notify();
  }

  private notify(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<HeartbeatInit> {
    for (;;) {
      const next = this.items.shift();
      if (next !== undefined) yield next;
      else if (this.ended) return;
      else await new Promise<void>((r) => (this.wake = r));
    }
  }
}

interface OpenStream {
  readonly queue: RequestQueue;
  readonly replies: AsyncIterator<HeartbeatResponse>;
  readonly ctl: AbortController;
}

/**
 * The agent's heartbeats on one long-lived NodeService.HeartbeatStream: opened
 * at the first heartbeat after each Register (reset), each heartbeat written
 * on it and its answer awaited, one at a time (the heartbeat loop is serial).
 * The coordinator authenticates the stream once, not every heartbeat, and no
 * HTTP/2 stream is set up per heartbeat. Any failure — the stream ending, an
 * error status, no answer within the call's timeout — ends the stream and
 * fails that heartbeat as a unary call would (the loop backs off, registers
 * again on NOT_FOUND); the next heartbeat opens a new one. A standby's
 * refusal (HA: it applied nothing) or UNAVAILABLE (the coordinator gone) sends
 * that heartbeat unary, which follows the standby's hint or the next address
 * within the call, as a unary heartbeat does. A coordinator that answers UNIMPLEMENTED (older, or with
 * `heartbeatStream: false`) processed nothing: that heartbeat and every later
 * one go unary until the next reset.
 */
export class StreamedHeartbeats {
  private open: OpenStream | undefined;
  private unsupported = false;
  private readonly log: Logger;

  constructor(private readonly o: StreamedHeartbeatsOptions) {
    this.log = o.logger ?? nullLogger;
  }

  /** "unary" after a coordinator without HeartbeatStream answered, until reset. */
  get mode(): "stream" | "unary" {
    return this.unsupported ? "unary" : "stream";
  }

  /** Ends the open stream (if any) and tries the stream again at the next heartbeat: after each Register. */
  reset(): void {
    this.closeStream();
    this.unsupported = false;
  }

  close(): void {
    this.closeStream();
  }

  async heartbeat(request: HeartbeatInit, options?: NodeCallOptions): Promise<HeartbeatResponse> {
    const unaryOptions: CallOptions = { ...this.o.callOptions, ...(options?.signal === undefined ? {} : { signal: options.signal }), ...(options?.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }) };
    if (this.unsupported) return this.o.calls.unary(request, unaryOptions);
    const s = this.open ?? this.openStream();
    s.queue.push(request);
    try {
      const next = await this.answer(s, options);
      if (next.done === true) throw new WardenError(Code.Unavailable, "the coordinator ended the heartbeat stream");
      return next.value;
    } catch (err) {
      this.closeStream(s);
      const e = WardenError.from(err);
      // A standby's refusal (it applied nothing), or the coordinator gone (the connection dropped or
      // refused): this heartbeat goes unary, which follows the hint or the next address within the
      // call, as a unary heartbeat does; the next one opens a stream where that answered. A repeat of
      // an applied heartbeat is dropped by its sequence.
      if (isNotLeader(e) || e.code === Code.Unavailable) return this.o.calls.unary(request, unaryOptions);
      if (e.code !== Code.Unimplemented) throw e;
      // Nothing was applied (the coordinator has no such method): this heartbeat and the next go unary.
      this.unsupported = true;
      this.log.info("the coordinator does not serve HeartbeatStream; sending unary heartbeats", { reason: e.rawMessage });
      return this.o.calls.unary(request, unaryOptions);
    }
  }

  /** The stream's next reply, within the call's timeout and signal (either ends the stream). */
  private answer(s: OpenStream, options: NodeCallOptions | undefined): Promise<IteratorResult<HeartbeatResponse>> {
    const signal = options?.signal;
    const timeoutMs = options?.timeoutMs;
    return new Promise((resolve, reject) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const onAbort = (): void => {
        done();
        reject(signal?.reason instanceof Error ? signal.reason : new WardenError(Code.Canceled, "heartbeat cancelled"));
      };
      const done = (): void => {
        if (timer !== undefined) clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      };
      if (signal?.aborted === true) {
        onAbort();
        return;
      }
      signal?.addEventListener("abort", onAbort, { once: true });
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          done();
          reject(new WardenError(Code.DeadlineExceeded, `no answer on the heartbeat stream within ${String(timeoutMs)} ms`));
        }, timeoutMs);
      }
      s.replies.next().then(
        (r) => {
          done();
          resolve(r);
        },
        (err: unknown) => {
          done();
          reject(err instanceof Error ? err : new WardenError(Code.Unknown, String(err)));
        },
      );
    });
  }

  private openStream(): OpenStream {
    const queue = new RequestQueue();
    const ctl = new AbortController();
    const replies = this.o.calls.stream(queue, { ...this.o.callOptions, signal: ctl.signal })[Symbol.asyncIterator]();
    const s: OpenStream = { queue, replies, ctl };
    this.open = s;
    // Once per Register (or after a failure): what carries this node's heartbeats now.
    this.log.info("heartbeats on a HeartbeatStream");
    return s;
  }

  private closeStream(which: OpenStream | undefined = this.open): void {
    if (which === undefined) return;
    if (this.open === which) this.open = undefined;
    which.queue.end();
    which.ctl.abort(new WardenError(Code.Canceled, "heartbeat stream closed"));
    void which.replies.return?.().catch(() => undefined);
  }
}
