import type { ServerDuplexStream, ServerReadableStream } from "@grpc/grpc-js";
import { Code, WardenError } from "@warden/common";
import { UndecodableRequest } from "./request-decode.js";

type RequestStream = ServerDuplexStream<unknown, unknown> | ServerReadableStream<unknown, unknown>;

/** Requests read ahead of the handler before the call is paused (as a Readable's object-mode high-water mark). */
const readAheadMessages = 16;

/**
 * The request side of a streaming call as an async iterator, read from the
 * call's events. Between two requests it holds one pending promise — not the
 * chain of async generator frames and promises of `Readable`'s own iterator
 * wrapped once more: on a stream that sends a message a second (every node's
 * heartbeats) each of those lived until the next message, outlived the young
 * generation and was promoted, only to die in the old one. Unlike the default
 * iterator, `return()` leaves the call open, so the handler can still answer
 * and end it. A request that did not decode is reported to `undecodable`
 * (which answers the call INVALID_ARGUMENT) and thrown to the handler.
 */
export class RequestIterator implements AsyncIterator<unknown> {
  private readonly queue: unknown[] = [];
  private ended = false;
  private failure: Error | undefined;
  private detached = false;
  private resolveNext: ((r: IteratorResult<unknown>) => void) | undefined;
  private rejectNext: ((err: unknown) => void) | undefined;
  private readonly onData = (msg: unknown): void => {
    if (this.resolveNext !== undefined && this.queue.length === 0) {
      this.settle(msg);
      return;
    }
    this.queue.push(msg);
    if (this.queue.length >= readAheadMessages) this.call.pause();
  };
  private readonly onEnd = (): void => {
    this.ended = true;
    this.wake();
  };
  private readonly onError = (err: unknown): void => {
    this.failure ??= err instanceof Error ? err : WardenError.from(err);
    this.wake();
  };
  private readonly onClose = (): void => {
    // Closed without its end (cancelled, reset): whoever waits must not wait forever.
    if (!this.ended) this.failure ??= new WardenError(Code.Canceled, "the request stream closed before its end");
    this.wake();
  };

  constructor(
    private readonly call: RequestStream,
    private readonly undecodable: (err: WardenError) => void,
  ) {
    call.on("data", this.onData);
    call.on("end", this.onEnd);
    call.on("error", this.onError);
    call.on("close", this.onClose);
  }

  next(): Promise<IteratorResult<unknown>> {
    if (this.queue.length > 0) {
      const msg = this.queue.shift();
      if (this.queue.length === 0 && !this.detached) this.call.resume();
      return this.result(msg);
    }
    if (this.failure !== undefined) return Promise.reject(this.failure);
    if (this.ended || this.detached) return Promise.resolve({ done: true, value: undefined });
    if (this.resolveNext !== undefined) return Promise.reject(new WardenError(Code.Internal, "a request stream was read twice at once"));
    return new Promise((resolve, reject) => {
      this.resolveNext = resolve;
      this.rejectNext = reject;
    });
  }

  /** Stops reading; the call stays open (the handler answers and ends it). */
  return(): Promise<IteratorResult<unknown>> {
    this.detach();
    this.wake();
    return Promise.resolve({ done: true, value: undefined });
  }

  private result(msg: unknown): Promise<IteratorResult<unknown>> {
    if (msg instanceof UndecodableRequest) {
      this.undecodable(msg.error);
      return Promise.reject(msg.error);
    }
    return Promise.resolve({ done: false, value: msg });
  }

  /** Hands `msg` to the waiting `next()`. */
  private settle(msg: unknown): void {
    const resolve = this.resolveNext;
    const reject = this.rejectNext;
    this.resolveNext = undefined;
    this.rejectNext = undefined;
    if (msg instanceof UndecodableRequest) {
      this.undecodable(msg.error);
      reject?.(msg.error);
      return;
    }
    resolve?.({ done: false, value: msg });
  }

  /** The waiting `next()`, if any, learns of the end, the failure or the detach (queued requests come first). */
  private wake(): void {
    if (this.resolveNext === undefined || this.queue.length > 0) return;
    const resolve = this.resolveNext;
    const reject = this.rejectNext;
    this.resolveNext = undefined;
    this.rejectNext = undefined;
    if (this.failure !== undefined) reject?.(this.failure);
    else resolve({ done: true, value: undefined });
  }

  private detach(): void {
    if (this.detached) return;
    this.detached = true;
    this.queue.length = 0;
    this.call.removeListener("data", this.onData);
    this.call.removeListener("end", this.onEnd);
    this.call.removeListener("error", this.onError);
    this.call.removeListener("close", this.onClose);
    this.call.pause();
  }
}
