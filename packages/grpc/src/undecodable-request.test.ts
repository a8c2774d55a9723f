import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Client as RawClient, credentials, type ClientDuplexStream, type ClientReadableStream, type ClientWritableStream, type ServiceError } from "@grpc/grpc-js";
import { create, createFileRegistry, toBinary, type DescMessage, type DescService } from "@bufbuild/protobuf";
import { FieldDescriptorProto_Label, FieldDescriptorProto_Type, FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, WardenError, isWardenError } from "@warden/common";
import { GrpcServer, LeanGrpcServer, fromGrpcError, type HandlerContext, type ServiceImpl } from "./index.js";

/*
 * Requests whose bytes are not the method's input message reach every
 * server and method kind, from a grpc-js client that writes bytes as given.
 * Each must answer INVALID_ARGUMENT naming the type (grpc-js alone answers
 * INTERNAL "Error deserializing request").
 */

// One message and every method kind: built at run time, no proto file needed.
const registry = createFileRegistry(
  create(FileDescriptorProtoSchema, {
    name: "wardentest/kinds.proto",
    package: "wardentest",
    syntax: "proto3",
    messageType: [{ name: "Item", field: [{ name: "text", number: 1, type: FieldDescriptorProto_Type.STRING, label: FieldDescriptorProto_Label.OPTIONAL, jsonName: "text" }] }],
    service: [
      {
        name: "Kinds",
        method: [
          { name: "One", inputType: ".wardentest.Item", outputType: ".wardentest.Item" },
          { name: "Many", inputType: ".wardentest.Item", outputType: ".wardentest.Item", serverStreaming: true },
          { name: "Collect", inputType: ".wardentest.Item", outputType: ".wardentest.Item", clientStreaming: true },
          { name: "Chat", inputType: ".wardentest.Item", outputType: ".wardentest.Item", clientStreaming: true, serverStreaming: true },
        ],
      },
      {
        name: "SingleRequestKinds",
        method: [
          { name: "One", inputType: ".wardentest.Item", outputType: ".wardentest.Item" },
          { name: "Many", inputType: ".wardentest.Item", outputType: ".wardentest.Item", serverStreaming: true },
        ],
      },
    ],
  }),
  () => undefined,
);
const Item = registry.getMessage("wardentest.Item") as DescMessage;
const Kinds = registry.getService("wardentest.Kinds") as DescService;
const SingleRequestKinds = registry.getService("wardentest.SingleRequestKinds") as DescService;

interface Seen {
  calls: number;
  received: string[];
  reason: unknown;
}
const seen: Seen = { calls: 0, received: [], reason: undefined };

function recordEnd(ctx: HandlerContext): void {
  ctx.signal.addEventListener("abort", () => {
    seen.reason = ctx.signal.reason as unknown;
  }, { once: true });
}

type ItemMsg = { text: string };
const one = async (req: ItemMsg): Promise<ItemMsg> => {
  seen.calls++;
  return { text: req.text };
};
const many = async function* (req: ItemMsg): AsyncIterable<ItemMsg> {
  seen.calls++;
  yield { text: req.text };
};
const handlers = {
  one,
  many,
  // Swallows the decode failure: the call must still answer INVALID_ARGUMENT.
  async collect(requests: AsyncIterable<ItemMsg>, ctx: HandlerContext) {
    seen.calls++;
    recordEnd(ctx);
    try {
      for await (const r of requests) seen.received.push(r.text);
    } catch {
      return { text: "swallowed" };
    }
    return { text: seen.received.join(",") };
  },
  async *chat(requests: AsyncIterable<ItemMsg>, ctx: HandlerContext) {
    seen.calls++;
    recordEnd(ctx);
    for await (const r of requests) {
      seen.received.push(r.text);
      yield { text: r.text };
    }
  },
};

const grpcServer = new GrpcServer().add(Kinds, handlers as unknown as ServiceImpl<typeof Kinds>);
const leanServer = new LeanGrpcServer().add(SingleRequestKinds, { one, many } as unknown as ServiceImpl<typeof SingleRequestKinds>);
const addresses = { grpc: "", lean: "" };

beforeAll(async () => {
  addresses.grpc = (await grpcServer.listen("127.0.0.1:0")).address;
  addresses.lean = (await leanServer.listen("127.0.0.1:0")).address;
});
afterAll(async () => {
  await Promise.all([grpcServer.shutdown(1000), leanServer.shutdown(1000)]);
});

const identity = (b: Buffer): Buffer => b;
const valid = (text: string): Buffer => Buffer.from(toBinary(Item, create(Item, { text })));

/** Not an Item: a truncated string, a string that is not UTF-8, an invalid wire type. */
const garbage: [string, Buffer][] = [
  ["truncated", Buffer.from([0x0a, 0x05, 0x61])],
  ["not UTF-8", Buffer.from([0x0a, 0x01, 0xff])],
  ["wire type 7", Buffer.from([0x0f, 0x01])],
];

function expectInvalidArgument(err: unknown): void {
  const e = fromGrpcError(err);
  expect(isWardenError(e, Code.InvalidArgument), e.message).toBe(true);
  expect(e.rawMessage).toMatch(/^request: is not a valid wardentest\.Item: /);
  expect(e.details).toEqual({ field: "request" });
}

function unary(c: RawClient, path: string, body: Buffer): Promise<unknown> {
  return new Promise((resolve) => {
    c.makeUnaryRequest(path, identity, identity, body, (err: ServiceError | null) => {
      resolve(err ?? "no error");
    });
  });
}

function serverStream(c: RawClient, path: string, body: Buffer): Promise<unknown> {
  return new Promise((resolve) => {
    const call: ClientReadableStream<Buffer> = c.makeServerStreamRequest(path, identity, identity, body);
    call.on("data", () => undefined);
    call.on("error", resolve);
    call.on("end", () => {
      resolve("no error");
    });
  });
}

describe.each([
  ["GrpcServer", "grpc", "Kinds"],
  ["LeanGrpcServer", "lean", "SingleRequestKinds"],
] as const)("a request that does not decode, on %s", (_name, server, service) => {
  const path = (m: string): string => `/wardentest.${service}/${m}`;

  it.each(garbage)("unary (%s): INVALID_ARGUMENT naming the type, handler not called", async (_what, bytes) => {
    const c = new RawClient(addresses[server], credentials.createInsecure());
    seen.calls = 0;
    expectInvalidArgument(await unary(c, path("One"), bytes));
    expect(seen.calls).toBe(0);
    expect(await unary(c, path("One"), valid("ok"))).toBe("no error");
    c.close();
  });

  it.each(garbage)("server streaming (%s): INVALID_ARGUMENT naming the type, handler not called", async (_what, bytes) => {
    const c = new RawClient(addresses[server], credentials.createInsecure());
    seen.calls = 0;
    expectInvalidArgument(await serverStream(c, path("Many"), bytes));
    expect(seen.calls).toBe(0);
    expect(await serverStream(c, path("Many"), valid("ok"))).toBe("no error");
    c.close();
  });
});

describe("a request that does not decode in a request stream, on GrpcServer", () => {
  it.each(garbage)("client streaming (%s): INVALID_ARGUMENT even though the handler swallowed it; its signal says why", async (_what, bytes) => {
    const c = new RawClient(addresses.grpc, credentials.createInsecure());
    seen.received = [];
    seen.reason = undefined;
    const err = await new Promise<unknown>((resolve) => {
      const call: ClientWritableStream<Buffer> = c.makeClientStreamRequest("/wardentest.Kinds/Collect", identity, identity, (e: ServiceError | null) => {
        resolve(e ?? "no error");
      });
      call.write(valid("first"));
      call.write(bytes);
      call.end();
    });
    expectInvalidArgument(err);
    expect(seen.received).toEqual(["first"]);
    await expect.poll(() => seen.reason, { timeout: 10_000 }).toBeInstanceOf(WardenError);
    expect((seen.reason as WardenError).code).toBe(Code.InvalidArgument);
    c.close();
  });

  it.each(garbage)("bidi streaming (%s): the replies so far, then INVALID_ARGUMENT", async (_what, bytes) => {
    const c = new RawClient(addresses.grpc, credentials.createInsecure());
    seen.received = [];
    seen.reason = undefined;
    const replies: string[] = [];
    const err = await new Promise<unknown>((resolve) => {
      const call: ClientDuplexStream<Buffer, Buffer> = c.makeBidiStreamRequest("/wardentest.Kinds/Chat", identity, identity);
      call.on("data", (b: Buffer) => {
        replies.push(b.subarray(2).toString());
        // The garbage goes after the first reply, so that reply is on the wire first.
        if (replies.length === 1) {
          call.write(bytes);
          call.end();
        }
      });
      call.on("error", resolve);
      call.on("end", () => {
        resolve("no error");
      });
      call.write(valid("first"));
    });
    expectInvalidArgument(err);
    expect(replies).toEqual(["first"]);
    expect(seen.received).toEqual(["first"]);
    await expect.poll(() => seen.reason, { timeout: 10_000 }).toBeInstanceOf(WardenError);
    expect((seen.reason as WardenError).code).toBe(Code.InvalidArgument);
    c.close();
  });

  it("valid request streams still complete OK through both kinds", async () => {
    const c = new RawClient(addresses.grpc, credentials.createInsecure());
    seen.received = [];
    const res = await new Promise<unknown>((resolve) => {
      const call: ClientWritableStream<Buffer> = c.makeClientStreamRequest("/wardentest.Kinds/Collect", identity, identity, (e: ServiceError | null, v?: Buffer) => {
        resolve(e ?? v?.subarray(2).toString());
      });
      call.write(valid("a"));
      call.write(valid("b"));
      call.end();
    });
    expect(res).toBe("a,b");
    c.close();
  });
});
