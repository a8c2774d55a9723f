import type { DescService } from "@bufbuild/protobuf";
import { Code, WardenError } from "@warden/common";
import type { HandlerContext, ServiceImpl } from "./types.js";

function unimplemented(name: string): WardenError {
  // The wording grpc-go's generated Unimplemented stubs use, which upstream backends answer.
  return new WardenError(Code.Unimplemented, `method ${name} not implemented`);
}

/**
 * A whole-service implementation from the methods a server implements: every
 * other method answers UNIMPLEMENTED, as a backend built from upstream stubs
 * does. For services (such as LocalAI's `backend.Backend`) whose servers
 * implement a few of many methods.
 */
export function withUnimplemented<T extends DescService>(svc: T, impl: Partial<ServiceImpl<T>>): ServiceImpl<T> {
  const out: Record<string, unknown> = { ...impl };
  for (const m of svc.methods) {
    if (out[m.localName] !== undefined) continue;
    const name = m.name;
    switch (m.methodKind) {
      case "unary":
      case "client_streaming":
        out[m.localName] = () => Promise.reject(unimplemented(name));
        break;
      case "server_streaming":
      case "bidi_streaming":
        out[m.localName] = () => ({
          [Symbol.asyncIterator]: () => ({ next: () => Promise.reject(unimplemented(name)) }),
        });
        break;
    }
  }
  return out as ServiceImpl<T>;
}

/** A raw client-streaming handler from a stream handler that yields its one reply. */
export function rawClientStreaming(h: (requests: AsyncIterable<Uint8Array>, ctx: HandlerContext) => AsyncIterable<Uint8Array>) {
  return async (requests: AsyncIterable<Uint8Array>, ctx: HandlerContext): Promise<Uint8Array> => {
    let reply: Uint8Array | undefined;
    for await (const r of h(requests, ctx)) {
      if (reply !== undefined) throw new WardenError(Code.Internal, "a client-streaming call answered more than one reply");
      reply = r;
    }
    if (reply === undefined) throw new WardenError(Code.Internal, "a client-streaming call answered no reply");
    return reply;
  };
}
