import { WardenError, Code } from "@warden/common";

/** Requests buffered ahead of a slow handler before the stream is paused (HTTP/2 flow control then holds the client). */
const requestHighWater = 64;

/** What the queue needs of the stream it reads: pause and resume for flow control. */
export interface Pausable {
  pause(): unknown;
  resume(): unknown;
}

/**
 * The requests of a client- or bidi-streaming call as the handler's async
 * iterable: messages are pushed as they arrive, the stream pauses while
 * `requestHighWater` wait unread, the iteration ends at the client's
 * half-close and throws once the call failed (cancel, deadline), so a
 * handler waiting for the next request is never stranded. One reader.
 */
export class RequestQueue implements AsyncIterable<Uint8Array> {
  private readonly queue: Uint8Array[] = [];
  private ended = false;
  private failure: WardenError | undefined;
  private wake: (() => void) | undefined;
  private paused = false;
  private iterated = false;

  constructor(private readonly source: Pausable) {}

  push(bytes: Uint8Array): void {
    if (this.ended || this.failure !== undefined) return;
    this.queue.push(bytes);
    if (this.queue.length >= requestHighWater && !this.paused) {
      this.paused = true;
      this.source.pause();
    }
    this.notify();
  }

  end(): void {
    this.ended = true;
    this.notify();
  }

  fail(reason: unknown): void {
    this.failure ??= WardenError.from(reason, Code.Canceled);
    this.queue.length = 0;
    this.notify();
  }

  private notify(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  [Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    if (this.iterated) throw new WardenError(Code.Internal, "a call's requests can be read once");
    this.iterated = true;
    return {
      next: async (): Promise<IteratorResult<Uint8Array>> => {
        for (;;) {
          if (this.failure !== undefined) throw this.failure;
          const next = this.queue.shift();
          if (next !== undefined) {
            if (this.paused && this.queue.length < requestHighWater / 2) {
              this.paused = false;
              this.source.resume();
            }
            return { value: next, done: false };
          }
          if (this.ended) return { value: undefined, done: true };
          await new Promise<void>((r) => (this.wake = r));
        }
      },
      return: (): Promise<IteratorResult<Uint8Array>> => {
        // The handler stopped reading: later requests are dropped, not buffered.
        this.ended = true;
        this.queue.length = 0;
        if (this.paused) {
          this.paused = false;
          this.source.resume();
        }
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }
}
