import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, createFileRegistry, toBinary, type DescMessage, type DescService } from "@bufbuild/protobuf";
import { FieldDescriptorProto_Label, FieldDescriptorProto_Type, FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, WardenError, isWardenError } from "@warden/common";
import { rawBidi } from "./raw-bidi.fixture.js";
import { EncodedRequest, GrpcServer, fromGrpcError, type RequestBytes, type ServiceImpl } from "./index.js";

/*
 * A method registered with `encodedRequests`: its handler is handed each
 * request as its bytes (EncodedRequest) and decodes it when it chooses; bytes
 * that are not the message fail when decoded, INVALID_ARGUMENT naming the
 * type, as they would have on arrival. Over a real grpc-js server and client.
 */

const registry = createFileRegistry(
  create(FileDescriptorProtoSchema, {
    name: "wardentest/encoded.proto",
    package: "wardentest",
    syntax: "proto3",
    messageType: [{ name: "Note", field: [{ name: "text", number: 1, type: FieldDescriptorProto_Type.STRING, label: FieldDescriptorProto_Label.OPTIONAL, jsonName: "text" }] }],
    service: [
      {
        name: "Notes",
        method: [
          { name: "Chat", inputType: ".wardentest.Note", outputType: ".wardentest.Note", clientStreaming: true, serverStreaming: true },
          { name: "Echo", inputType: ".wardentest.Note", outputType: ".wardentest.Note", clientStreaming: true, serverStreaming: true },
        ],
      },
    ],
  }),
  () => undefined,
);
const Note = registry.getMessage("wardentest.Note") as DescMessage;
const Notes = registry.getService("wardentest.Notes") as DescService;

type NoteMsg = { text: string };
/** What the Chat handler was handed, per request: "encoded" for an EncodedRequest. */
const handed: string[] = [];

const handlers = {
  // Requests as bytes: decodes each unless it is the one to skip (the third), so undecoded junk there never fails.
  async *chat(requests: AsyncIterable<RequestBytes<NoteMsg>>) {
    let i = 0;
    for await (const r of requests) {
      handed.push(r instanceof EncodedRequest ? "encoded" : typeof r);
      if (++i === 3) {
        yield { text: `skipped ${String(r instanceof EncodedRequest ? r.bytes.length : -1)} bytes` };
        continue;
      }
      yield { text: r.decode().text };
    }
  },
  // Not named in encodedRequests: decoded on arrival, as before.
  async *echo(requests: AsyncIterable<NoteMsg>) {
    for await (const r of requests) yield { text: r.text };
  },
};

const server = new GrpcServer().add(Notes, handlers as unknown as ServiceImpl<typeof Notes>, { encodedRequests: ["chat"] });
let address = "";
beforeAll(async () => {
  address = (await server.listen("127.0.0.1:0")).address;
});
afterAll(async () => {
  await server.shutdown(1000);
});

const note = (text: string): Buffer => Buffer.from(toBinary(Note, create(Note, { text })));
/** A string field that is not UTF-8: not a Note. */
const junk = Buffer.from([0x0a, 0x01, 0xff]);

/** Writes `messages` on a bidi call, then ends it; the replies' texts, and how it ended. */
function converse(path: string, messages: Buffer[]): Promise<{ replies: string[]; end: unknown }> {
  return rawBidi(address, path, messages);
}

describe("GrpcServer encodedRequests", () => {
  it("hands the method its requests as their bytes, decoded by the handler", async () => {
    handed.length = 0;
    const { replies, end } = await converse("/wardentest.Notes/Chat", [note("a"), note("b")]);
    expect({ replies, end }).toEqual({ replies: ["a", "b"], end: "ok" });
    expect(handed).toEqual(["encoded", "encoded"]);
  });

  it("does not decode on arrival: junk the handler never decodes fails nothing", async () => {
    handed.length = 0;
    const { replies, end } = await converse("/wardentest.Notes/Chat", [note("a"), note("b"), junk, note("d")]);
    expect({ replies, end }).toEqual({ replies: ["a", "b", "skipped 3 bytes", "d"], end: "ok" });
  });

  it("junk the handler decodes ends the call INVALID_ARGUMENT naming the type and the field, after the replies before it", async () => {
    const { replies, end } = await converse("/wardentest.Notes/Chat", [note("a"), junk]);
    expect(replies).toEqual(["a"]);
    const e = fromGrpcError(end);
    expect(isWardenError(e, Code.InvalidArgument), e.message).toBe(true);
    expect(e.rawMessage).toMatch(/^request: is not a valid wardentest\.Note: /);
    expect(e.details).toEqual({ field: "request" });
  });

  it("leaves the service's other methods decoding on arrival: junk there is INVALID_ARGUMENT before the handler reads it", async () => {
    const { replies, end } = await converse("/wardentest.Notes/Echo", [note("a"), junk, note("c")]);
    expect(replies).toEqual(["a"]);
    expect(fromGrpcError(end).code).toBe(Code.InvalidArgument);
  });

  it("refuses a name that is not one of the service's methods, adding nothing", () => {
    const other = new GrpcServer();
    let err: unknown;
    try {
      other.add(Notes, handlers as unknown as ServiceImpl<typeof Notes>, { encodedRequests: ["chatt"] });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(WardenError);
    expect((err as WardenError).message).toMatch(/encodedRequests names chatt/);
    // Nothing was added: the service can still be added whole.
    expect(() => other.add(Notes, handlers as unknown as ServiceImpl<typeof Notes>, { encodedRequests: ["chat"] })).not.toThrow();
  });
});
