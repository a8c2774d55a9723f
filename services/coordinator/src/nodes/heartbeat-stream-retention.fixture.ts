/**
 * Run with `node --expose-gc --import tsx`: feeds 200 heartbeats through one
 * open heartbeatStream, each answered, with the stream still open at the end;
 * then collects garbage and prints how many of the answered requests — as
 * handed over (their bytes) and as decoded — are still reachable. Then the
 * same stream driven by events, as the server drives it: how many promises
 * 200 more heartbeats made (a pulled chain makes several per message, each
 * waiting for the next message). Used by heartbeat-stream-retention.test.ts.
 */
import { create, toBinary } from "@bufbuild/protobuf";
import { Metadata } from "@grpc/grpc-js";
import { HeartbeatRequestSchema, type HeartbeatRequest } from "@warden/proto";
import { promiseHooks } from "node:v8";
import { EncodedRequest, pushedRequests, startReplies, type RequestBytes, type RequestSink } from "@warden/grpc";
import { heartbeatStream } from "./heartbeat-stream.js";

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error("run with --expose-gc");

const beats = 200;
const refs: WeakRef<object>[] = [];
let wake: (() => void) | undefined;
const pending: RequestBytes<HeartbeatRequest>[] = [];
/** The agent's side: one request at a time, the stream never half-closed. */
const requests: AsyncIterable<RequestBytes<HeartbeatRequest>> = {
  [Symbol.asyncIterator]: () => ({
    next: async () => {
      while (pending.length === 0) await new Promise<void>((r) => (wake = r));
      return { done: false, value: pending.shift() as RequestBytes<HeartbeatRequest> };
    },
  }),
};
/** As the server hands a request over, telling the fixture of the message it decodes to. */
class Tracked extends EncodedRequest<HeartbeatRequest> {
  override decode(): HeartbeatRequest {
    const req = super.decode();
    refs.push(new WeakRef(req));
    return req;
  }
}
const call = new AbortController();
const ctx = { signal: call.signal, metadata: new Metadata(), peer: "test", deadlineAtMs: undefined, responseHeader: new Metadata(), responseTrailer: new Metadata() };
const answers = heartbeatStream(requests, ctx, { boundNodeOf: () => "n1", beat: () => ({}) })[Symbol.asyncIterator]();
/** Made in a frame of its own: this module's suspended frame must not be what keeps the last one. */
function send(i: number): void {
  const req = new Tracked(HeartbeatRequestSchema, toBinary(HeartbeatRequestSchema, create(HeartbeatRequestSchema, { nodeId: "n1", sequence: BigInt(i + 1) })));
  refs.push(new WeakRef(req));
  pending.push(req);
  wake?.();
}
for (let i = 0; i < beats; i++) {
  send(i);
  await answers.next();
}
for (let i = 0; i < 3; i++) {
  gc();
  await new Promise((r) => setImmediate(r));
}
const reachable = refs.filter((r) => r.deref() !== undefined).length;

// Pushed: the server's way (server-handlers.ts), each message handed over as it arrives.
let push: RequestSink<RequestBytes<HeartbeatRequest>> | undefined;
const pushed = pushedRequests<RequestBytes<HeartbeatRequest>>((sink) => {
  push = sink;
  return { pause: () => undefined, resume: () => undefined, stop: () => undefined };
});
const pushCall = new AbortController();
let answered = 0;
let failure: string | null = null;
startReplies(heartbeatStream(pushed, { ...ctx, signal: pushCall.signal }, { boundNodeOf: () => "n1", beat: () => ({}) }), {
  reply: () => {
    answered++;
  },
  end: () => undefined,
  fail: (err) => {
    failure = err instanceof Error ? err.message : "failed";
  },
});
const heartbeatOf = (i: number): EncodedRequest<HeartbeatRequest> => new EncodedRequest(HeartbeatRequestSchema, toBinary(HeartbeatRequestSchema, create(HeartbeatRequestSchema, { nodeId: "n1", sequence: BigInt(i + 1) })));
let promises = 0;
// Typed Function by @types/node; it is the hook's stop.
const stopCounting = promiseHooks.onInit(() => {
  promises++;
}) as () => void;
for (let i = 0; i < beats; i++) push?.message(heartbeatOf(i));
stopCounting();
process.stdout.write(`${JSON.stringify({ beats, tracked: refs.length, reachable, pushedAnswered: answered, pushedPromises: promises, pushedFailure: failure })}\n`);
call.abort();
pushCall.abort();
