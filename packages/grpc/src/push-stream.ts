/**
 * Streams driven by events instead of pulled. A pulled stream keeps a chain
 * of pending promises (one per layer: the writer, each wrapper, the handler,
 * the request reader) between two messages; on a stream that carries one
 * message a second — every node's heartbeats — each link lives that second,
 * outlives the young generation and is promoted, only to die in the old one.
 * A pushed stream keeps nothing pending between messages: the request side
 * calls its sink on each message, the handler calls the reply sink.
 *
 * Both kinds stay AsyncIterables, so a caller that pulls (a test, a wrapper
 * that knows nothing of pushing) still can; the server pushes when it can.
 */
import { WardenError } from "@warden/common";

/** Where a pushed reply stream writes. */
export interface ReplySink<T> {
  /** One reply, in order. The source bounds its own replies (the server writes each as it comes). */
  reply(msg: T): void;
  /** The stream's clean end (status OK). */
  end(): void;
  /** The stream's end with `err` as its status. */
  fail(err: unknown): void;
}

/** What a pushed request stream calls. */
export interface RequestSink<T> {
  message(msg: T): void;
  /** The caller half-closed: no more messages. */
  end(): void;
  /** The request side failed (the call was cancelled or reset, a message did not decode). */
  fail(err: unknown): void;
}

/** The reader's controls over a pushed request stream. */
export interface RequestFlow {
  /** Stops the messages for now (they wait in the transport's flow control). */
  pause(): void;
  resume(): void;
  /** Stops reading for good; the call stays open for the replies' end. */
  stop(): void;
}

const pushReplies = Symbol("warden.pushReplies");
const pushRequests = Symbol("warden.pushRequests");

/** A reply stream the server can drive by events (see the module's comment). */
export interface PushReplies<T> extends AsyncIterable<T> {
  [pushReplies](sink: ReplySink<T>): void;
}

/** A request stream that can be read by events. */
export interface PushRequests<T> extends AsyncIterable<T> {
  [pushRequests](sink: RequestSink<T>): RequestFlow;
}

export function isPushReplies<T>(x: AsyncIterable<T>): x is PushReplies<T> {
  return pushReplies in x;
}

export function isPushRequests<T>(x: AsyncIterable<T>): x is PushRequests<T> {
  return pushRequests in x;
}

/** Starts pushing `replies` into `sink`. */
export function startReplies<T>(replies: PushReplies<T>, sink: ReplySink<T>): void {
  replies[pushReplies](sink);
}

/**
 * Reads `requests` by events: pushed when it can be, else pulled one at a
 * time and handed on. The pull keeps no message once handed on (no suspended
 * frame holds the last one).
 */
export function readRequests<T>(requests: AsyncIterable<T>, sink: RequestSink<T>): RequestFlow {
  if (isPushRequests(requests)) return requests[pushRequests](sink);
  const it = requests[Symbol.asyncIterator]();
  let paused = false;
  let stopped = false;
  let pulling = false;
  const pull = (): void => {
    if (paused || stopped || pulling) return;
    pulling = true;
    it.next().then(
      (r) => {
        pulling = false;
        if (stopped) return;
        if (r.done === true) {
          stopped = true;
          sink.end();
          return;
        }
        sink.message(r.value);
        pull();
      },
      (err: unknown) => {
        pulling = false;
        if (stopped) return;
        stopped = true;
        sink.fail(err);
      },
    );
  };
  pull();
  return {
    pause: () => {
      paused = true;
    },
    resume: () => {
      paused = false;
      pull();
    },
    stop: () => {
      if (stopped) return;
      stopped = true;
      void it.return?.().catch(() => undefined);
    },
  };
}

/** A request stream readable by events (`start`) as well as by pulling. */
export function pushedRequests<T>(start: (sink: RequestSink<T>) => RequestFlow): PushRequests<T> {
  return {
    [pushRequests]: start,
    [Symbol.asyncIterator]: () => new PulledReplies<T>((sink) => {
      const flow = start({ message: (m) => { sink.reply(m); }, end: () => { sink.end(); }, fail: (e) => { sink.fail(e); } });
      return () => {
        flow.stop();
      };
    }),
  };
}

/** A reply stream driven by `start` when pushed, and pullable as an AsyncIterable for everyone else. */
export function pushedReplies<T>(start: (sink: ReplySink<T>) => void): PushReplies<T> {
  return {
    [pushReplies]: start,
    [Symbol.asyncIterator]: () =>
      new PulledReplies<T>((sink) => {
        start(sink);
        return undefined;
      }),
  };
}

/** The pull side of a pushed stream: what it pushes waits here until asked for. */
class PulledReplies<T> implements AsyncIterator<T> {
  private readonly queue: T[] = [];
  private outcome: { readonly t: "end" } | { readonly t: "fail"; readonly err: Error } | undefined;
  private waiting: { resolve: (r: IteratorResult<T>) => void; reject: (err: unknown) => void } | undefined;
  private started = false;
  private stop: (() => void) | undefined;

  constructor(private readonly begin: (sink: ReplySink<T>) => (() => void) | undefined) {}

  next(): Promise<IteratorResult<T>> {
    if (!this.started) {
      this.started = true;
      this.stop = this.begin({
        reply: (m) => {
          this.deliver(m);
        },
        end: () => {
          this.finish({ t: "end" });
        },
        fail: (err) => {
          this.finish({ t: "fail", err: err instanceof Error ? err : WardenError.from(err) });
        },
      });
    }
    if (this.queue.length > 0) return Promise.resolve({ done: false, value: this.queue.shift() as T });
    if (this.outcome !== undefined) return this.outcome.t === "end" ? Promise.resolve({ done: true, value: undefined }) : Promise.reject(this.outcome.err);
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
    });
  }

  return(): Promise<IteratorResult<T>> {
    this.outcome ??= { t: "end" };
    this.stop?.();
    return Promise.resolve({ done: true, value: undefined });
  }

  private deliver(m: T): void {
    if (this.outcome !== undefined) return;
    const w = this.waiting;
    if (w === undefined) {
      this.queue.push(m);
      return;
    }
    this.waiting = undefined;
    w.resolve({ done: false, value: m });
  }

  private finish(outcome: NonNullable<PulledReplies<T>["outcome"]>): void {
    if (this.outcome !== undefined) return;
    this.outcome = outcome;
    const w = this.waiting;
    if (w === undefined || this.queue.length > 0) return;
    this.waiting = undefined;
    if (outcome.t === "end") w.resolve({ done: true, value: undefined });
    else w.reject(outcome.err);
  }
}
