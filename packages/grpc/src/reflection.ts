import { toBinary, type DescFile, type DescService } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import type { ServerReflectionRequest, ServerReflectionResponse } from "@warden/proto";
import type { HandlerContext } from "./types.js";

type ResponseInit = Omit<Partial<ServerReflectionResponse>, "$typeName" | "messageResponse"> & {
  messageResponse:
    | { case: "fileDescriptorResponse"; value: { fileDescriptorProto: Uint8Array[] } }
    | { case: "listServicesResponse"; value: { service: { name: string }[] } }
    | { case: "errorResponse"; value: { errorCode: number; errorMessage: string } };
};

/**
 * Server reflection over the protobuf-es descriptors of the served services:
 * list_services, file_by_filename and file_containing_symbol (files are sent
 * with their transitive dependencies so a client can resolve every type).
 */
export class ReflectionIndex {
  private readonly services: string[] = [];
  private readonly files = new Map<string, DescFile>();
  private readonly symbols = new Map<string, DescFile>();

  add(svc: DescService): void {
    if (!this.services.includes(svc.typeName)) this.services.push(svc.typeName);
    this.addFile(svc.file);
  }

  private addFile(file: DescFile): void {
    if (this.files.has(file.proto.name)) return;
    this.files.set(file.proto.name, file);
    for (const s of file.services) {
      this.symbols.set(s.typeName, file);
      for (const m of s.methods) this.symbols.set(`${s.typeName}.${m.name}`, file);
    }
    for (const m of file.messages) this.addMessage(m, file);
    for (const e of file.enums) this.symbols.set(e.typeName, file);
    for (const d of file.dependencies) this.addFile(d);
  }

  private addMessage(m: DescFile["messages"][number], file: DescFile): void {
    this.symbols.set(m.typeName, file);
    for (const n of m.nestedMessages) this.addMessage(n, file);
    for (const e of m.nestedEnums) this.symbols.set(e.typeName, file);
  }

  listServices(): string[] {
    return [...this.services];
  }

  private withDeps(file: DescFile): Uint8Array[] {
    const seen = new Set<string>();
    const out: Uint8Array[] = [];
    const visit = (f: DescFile): void => {
      if (seen.has(f.proto.name)) return;
      seen.add(f.proto.name);
      out.push(toBinary(FileDescriptorProtoSchema, f.proto));
      for (const d of f.dependencies) visit(d);
    };
    visit(file);
    return out;
  }

  answer(req: ServerReflectionRequest): ResponseInit {
    const base = { validHost: req.host, originalRequest: req };
    const notFound = (what: string): ResponseInit => ({ ...base, messageResponse: { case: "errorResponse", value: { errorCode: 5, errorMessage: `${what} not found` } } });
    const r = req.messageRequest;
    switch (r.case) {
      case "listServices":
        return { ...base, messageResponse: { case: "listServicesResponse", value: { service: this.services.map((name) => ({ name })) } } };
      case "fileByFilename": {
        const f = this.files.get(r.value);
        return f === undefined ? notFound(`file "${r.value}"`) : { ...base, messageResponse: { case: "fileDescriptorResponse", value: { fileDescriptorProto: this.withDeps(f) } } };
      }
      case "fileContainingSymbol": {
        const f = this.symbols.get(r.value.replace(/^\./, ""));
        return f === undefined ? notFound(`symbol "${r.value}"`) : { ...base, messageResponse: { case: "fileDescriptorResponse", value: { fileDescriptorProto: this.withDeps(f) } } };
      }
      case "fileContainingExtension":
      case "allExtensionNumbersOfType":
        return { ...base, messageResponse: { case: "errorResponse", value: { errorCode: 12, errorMessage: "extensions are not used by Warden" } } };
      case undefined:
        return { ...base, messageResponse: { case: "errorResponse", value: { errorCode: 3, errorMessage: "message_request: empty request" } } };
    }
  }

  /** Handler for ServerReflectionInfo (v1 and v1alpha share the message shapes). */
  handler(): (requests: AsyncIterable<ServerReflectionRequest>, ctx: HandlerContext) => AsyncIterable<ResponseInit> {
    const self = this;
    return async function* (requests, ctx) {
      for await (const req of requests) {
        if (ctx.signal.aborted) return;
        yield self.answer(req);
      }
    };
  }
}
