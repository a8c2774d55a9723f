import { Client as RawClient, credentials, type ClientDuplexStream } from "@grpc/grpc-js";

const identity = (b: Buffer): Buffer => b;

/**
 * A bidi call from a grpc-js client that writes bytes as given (tests of what
 * a server does with any bytes): writes `messages`, then half-closes unless
 * told not to, cancels after `cancelAfter` replies if asked; resolves with the
 * replies' single string field (a one-field message: tag and length skipped)
 * and how the call ended ("ok" or the error).
 */
export function rawBidi(address: string, path: string, messages: Buffer[], opts: { cancelAfter?: number; halfClose?: boolean } = {}): Promise<{ replies: string[]; end: unknown }> {
  const c = new RawClient(address, credentials.createInsecure());
  const replies: string[] = [];
  return new Promise((resolve) => {
    const call: ClientDuplexStream<Buffer, Buffer> = c.makeBidiStreamRequest(path, identity, identity);
    const done = (end: unknown): void => {
      c.close();
      resolve({ replies, end });
    };
    call.on("data", (b: Buffer) => {
      replies.push(b.subarray(2).toString());
      if (replies.length === opts.cancelAfter) call.cancel();
    });
    call.on("error", done);
    call.on("end", () => {
      done("ok");
    });
    for (const m of messages) call.write(m);
    if (opts.halfClose !== false) call.end();
  });
}
