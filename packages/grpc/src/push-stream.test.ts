import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, createFileRegistry, toBinary, type DescMessage, type DescService } from "@bufbuild/protobuf";
import { FieldDescriptorProto_Label, FieldDescriptorProto_Type, FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, WardenError } from "@warden/common";
import { rawBidi } from "./raw-bidi.fixture.js";
import { GrpcServer, fromGrpcError, isPushRequests, pushedReplies, readRequests, type HandlerContext, type ReplySink, type RequestSink, type ServiceImpl } from "./index.js";

/** An async iterable of `items`, then `end` (a failure when an Error); counts return(). */
function source<T>(items: T[], end?: Error): AsyncIterable<T> & { returned: number } {
  const s = {
    returned: 0,
    [Symbol.asyncIterator]: () => {
      let i = 0;
      return {
        next: async (): Promise<IteratorResult<T>> => {
          if (i < items.length) return { done: false, value: items[i++] as T };
          if (end !== undefined) throw end;
          return { done: true, value: undefined };
        },
        return: async (): Promise<IteratorResult<T>> => {
          s.returned++;
          return { done: true, value: undefined };
        },
      };
    },
  };
  return s;
}

function recorder(): RequestSink<number> & { seen: string[]; settled: Promise<void> } {
  let settle: () => void = () => undefined;
  const settled = new Promise<void>((r) => (settle = r));
  const seen: string[] = [];
  return {
    seen,
    settled,
    message: (m) => seen.push(`m${String(m)}`),
    end: () => {
      seen.push("end");
      settle();
    },
    fail: (e) => {
      seen.push(`fail ${e instanceof Error ? e.message : String(e)}`);
      settle();
    },
  };
}

describe("readRequests over a pulled stream", () => {
  it("hands on every message in order, then the end", async () => {
    const r = recorder();
    readRequests(source([1, 2, 3]), r);
    await r.settled;
    expect(r.seen).toEqual(["m1", "m2", "m3", "end"]);
  });

  it("hands on the failure after the messages before it", async () => {
    const r = recorder();
    readRequests(source([1], new Error("reset")), r);
    await r.settled;
    expect(r.seen).toEqual(["m1", "fail reset"]);
  });

  it("pulls nothing while paused, goes on when resumed, and stop ends the source (return) with nothing more handed on", async () => {
    const seen: number[] = [];
    const src = source([1, 2, 3, 4]);
    const flow = readRequests(src, {
      message: (m) => {
        seen.push(m);
        if (m === 2) flow.pause();
      },
      end: () => undefined,
      fail: () => undefined,
    });
    await new Promise((r) => setTimeout(r, 20));
    expect(seen).toEqual([1, 2]);
    flow.resume();
    await new Promise((r) => setTimeout(r, 20));
    expect(seen).toEqual([1, 2, 3, 4]);
    const src2 = source([1, 2, 3]);
    const seen2: number[] = [];
    const flow2 = readRequests(src2, { message: (m) => seen2.push(m), end: () => seen2.push(-1), fail: () => seen2.push(-2) });
    flow2.stop();
    await new Promise((r) => setTimeout(r, 20));
    expect({ seen: seen2.filter((m) => m > 1), returned: src2.returned }).toEqual({ seen: [], returned: 1 });
  });
});

describe("pushedReplies, pulled", () => {
  it("gives what was pushed in order, then its end; what is pushed before the first ask waits", async () => {
    const replies = pushedReplies<number>((sink) => {
      sink.reply(1);
      setTimeout(() => {
        sink.reply(2);
        sink.end();
        sink.reply(3);
      }, 5);
    });
    const out: number[] = [];
    for await (const r of replies) out.push(r);
    expect(out).toEqual([1, 2]);
  });

  it("fails with the pushed failure after the replies before it", async () => {
    const replies = pushedReplies<number>((sink) => {
      sink.reply(1);
      sink.fail(new WardenError(Code.PermissionDenied, "no"));
    });
    const out: number[] = [];
    await expect(
      (async () => {
        for await (const r of replies) out.push(r);
      })(),
    ).rejects.toThrow("no");
    expect(out).toEqual([1]);
  });
});

// A real server: a bidi method whose handler is pushed, reading its requests by events.
const registry = createFileRegistry(
  create(FileDescriptorProtoSchema, {
    name: "wardentest/push.proto",
    package: "wardentest",
    syntax: "proto3",
    messageType: [{ name: "Word", field: [{ name: "text", number: 1, type: FieldDescriptorProto_Type.STRING, label: FieldDescriptorProto_Label.OPTIONAL, jsonName: "text" }] }],
    service: [{ name: "Words", method: [{ name: "Echo", inputType: ".wardentest.Word", outputType: ".wardentest.Word", clientStreaming: true, serverStreaming: true }] }],
  }),
  () => undefined,
);
const Word = registry.getMessage("wardentest.Word") as DescMessage;
const Words = registry.getService("wardentest.Words") as DescService;
type WordMsg = { text: string };
const ends: string[] = [];
/** Whether the server handed the handler a request stream it can read by events. */
let pushable: boolean | undefined;

const server = new GrpcServer().add(Words, {
  echo: (requests: AsyncIterable<WordMsg>, ctx: HandlerContext) =>
    pushedReplies<WordMsg>((sink: ReplySink<WordMsg>) => {
      pushable = isPushRequests(requests);
      ctx.signal.addEventListener("abort", () => ends.push(`signal ${(ctx.signal.reason as WardenError).code}`), { once: true });
      readRequests(requests, {
        message: (m) => {
          if (m.text === "boom") {
            sink.fail(new WardenError(Code.FailedPrecondition, "boom refused"));
            return;
          }
          sink.reply({ text: m.text.toUpperCase() });
        },
        end: () => {
          ends.push("end");
          sink.end();
        },
        fail: (e) => {
          ends.push(`requests failed ${WardenError.from(e).code}`);
          sink.fail(e);
        },
      });
    }),
} as unknown as ServiceImpl<typeof Words>);
let address = "";
beforeAll(async () => {
  address = (await server.listen("127.0.0.1:0")).address;
});
afterAll(async () => {
  await server.shutdown(1000);
});

const word = (text: string): Buffer => Buffer.from(toBinary(Word, create(Word, { text })));

function converse(messages: Buffer[], opts: { cancelAfter?: number; halfClose?: boolean } = {}): Promise<{ replies: string[]; end: unknown }> {
  return rawBidi(address, "/wardentest.Words/Echo", messages, opts);
}

describe("a pushed bidi handler on GrpcServer", () => {
  it("reads its requests by events and answers each in order, then ends OK", async () => {
    ends.length = 0;
    const r = await converse([word("a"), word("b"), word("c")]);
    expect(r).toEqual({ replies: ["A", "B", "C"], end: "ok" });
    expect(pushable).toBe(true);
    await expect.poll(() => ends).toEqual(["end", `signal ${String(Code.Canceled)}`]);
  });

  it("ends the call with the handler's failure as its status, after the replies before it", async () => {
    const r = await converse([word("a"), word("boom"), word("c")]);
    expect(r.replies).toEqual(["A"]);
    const e = fromGrpcError(r.end);
    expect({ code: e.code, message: e.rawMessage }).toEqual({ code: Code.FailedPrecondition, message: "boom refused" });
  });

  it("a request that does not decode fails the request side and the call INVALID_ARGUMENT", async () => {
    ends.length = 0;
    const r = await converse([word("a"), Buffer.from([0x0a, 0x01, 0xff])]);
    expect(r.replies).toEqual(["A"]);
    expect(fromGrpcError(r.end).code).toBe(Code.InvalidArgument);
    await expect.poll(() => ends).toContain(`requests failed ${String(Code.InvalidArgument)}`);
  });

  it("a client that cancels settles the request side and aborts the handler's signal CANCELLED", async () => {
    ends.length = 0;
    const r = await converse([word("a")], { cancelAfter: 1, halfClose: false });
    expect(r.replies).toEqual(["A"]);
    expect(fromGrpcError(r.end).code).toBe(Code.Canceled);
    // grpc-js may end the request side of a cancelled call before it says it was cancelled: the signal is what tells.
    await expect.poll(() => ends.includes(`signal ${String(Code.Canceled)}`) && ends.some((e) => e === "end" || e.startsWith("requests failed"))).toBe(true);
  });
});
