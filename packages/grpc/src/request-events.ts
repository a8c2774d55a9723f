import type { ServerDuplexStream, ServerReadableStream } from "@grpc/grpc-js";
import { Code, WardenError } from "@warden/common";
import type { RequestFlow, RequestSink } from "./push-stream.js";
import { UndecodableRequest } from "./request-decode.js";

type RequestStream = ServerDuplexStream<unknown, unknown> | ServerReadableStream<unknown, unknown>;

/**
 * The request side of a streaming call read by events (push-stream.ts): each
 * message goes to the sink as it arrives, nothing pending between two. A
 * request that did not decode is reported to `undecodable` (which answers the
 * call INVALID_ARGUMENT) and fails the sink; so do an error, a cancel and a
 * close before the end. grpc-js may end the request side of a cancelled call
 * before it tells of the cancel: a handler learns of a cancel from its signal.
 * After the first end or failure the sink hears nothing more.
 * `stop()` leaves the call open, so the handler can still answer and end it.
 */
export class RequestEvents implements RequestFlow {
  private done = false;
  private readonly onData = (msg: unknown): void => {
    if (this.done) return;
    if (msg instanceof UndecodableRequest) {
      // Settled first: reporting it answers the call, whose own error event must not reach the sink in its place.
      this.settle();
      this.undecodable(msg.error);
      this.sink.fail(msg.error);
      return;
    }
    this.sink.message(msg);
  };
  private readonly onEnd = (): void => {
    if (this.done) return;
    this.settle();
    this.sink.end();
  };
  private readonly onError = (err: unknown): void => {
    if (this.done) return;
    this.settle();
    this.sink.fail(err instanceof Error ? err : WardenError.from(err));
  };
  private readonly onClose = (): void => {
    // Closed without its end (cancelled, reset): the reader must not wait forever.
    if (this.done) return;
    this.settle();
    this.sink.fail(new WardenError(Code.Canceled, "the request stream closed before its end"));
  };
  /** grpc-js tells of a cancelled call (the client's cancel, a reset, the deadline) by this, not always by a close. */
  private readonly onCancelled = (): void => {
    if (this.done) return;
    this.settle();
    this.sink.fail(new WardenError(Code.Canceled, "the call was cancelled"));
  };

  constructor(
    private readonly call: RequestStream,
    private readonly undecodable: (err: WardenError) => void,
    private readonly sink: RequestSink<unknown>,
  ) {
    call.on("data", this.onData);
    call.on("end", this.onEnd);
    call.on("error", this.onError);
    call.on("close", this.onClose);
    call.on("cancelled", this.onCancelled);
  }

  pause(): void {
    if (!this.done) this.call.pause();
  }

  resume(): void {
    if (!this.done) this.call.resume();
  }

  stop(): void {
    if (this.done) return;
    this.settle();
    this.call.pause();
  }

  private settle(): void {
    this.done = true;
    this.call.removeListener("data", this.onData);
    this.call.removeListener("end", this.onEnd);
    this.call.removeListener("error", this.onError);
    this.call.removeListener("close", this.onClose);
    this.call.removeListener("cancelled", this.onCancelled);
  }
}
