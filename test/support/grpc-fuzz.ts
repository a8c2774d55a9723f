/**
 * fast-check arbitraries for hostile gRPC requests, built from a service's
 * protobuf descriptors, and the checks every answer must pass. Requests are
 * wire bytes written field by field (so out-of-range enums, repeated oneof
 * members and invalid UTF-8 are all reachable), random bytes, truncations of
 * either, and malformed gRPC frames. Every string a structured request
 * carries is hostile (NUL, control characters, 64 KiB, RTL overrides,
 * leading "--", invalid UTF-8): never a valid identifier or host:port, so a
 * hostile burst can be told apart from an operator's legitimate change.
 */
import fc from "fast-check";
import { ScalarType, type DescField, type DescMessage, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { methodPath } from "@warden/grpc";
import { frame, type RawGrpc, type RawOutcome } from "./raw-grpc.js";

/** Strings no boundary may accept as an id or address. */
export const hostileString: fc.Arbitrary<string> = fc.oneof(
  { weight: 1, arbitrary: fc.constant("x".repeat(65_536)) },
  { weight: 12, arbitrary: fc.constantFrom("", "\u0000", "a\u0000b", "\u202Emodel", "\u200Fx\u202Ey", "--help", "--model=../../etc/passwd", "-x", "../../../../etc/passwd", "a/b", "\r\nX-Injected: 1", "\ud800", "x".repeat(129), "\u{1F600}") },
  { weight: 3, arbitrary: fc.string({ maxLength: 40 }).map((s) => `--${s}`) },
  { weight: 3, arbitrary: fc.string({ unit: fc.integer({ min: 0, max: 31 }).map((c) => String.fromCharCode(c)), minLength: 1, maxLength: 20 }) },
  { weight: 3, arbitrary: fc.string({ unit: "binary", maxLength: 40 }).map((s) => `${s}\u0000`) },
  { weight: 3, arbitrary: fc.string({ maxLength: 40 }).map((s) => `\u202E${s}`) },
);

/** A string field on the wire: hostile text, or bytes that are not UTF-8. */
const stringBytes: fc.Arbitrary<Uint8Array> = fc.oneof(
  { weight: 4, arbitrary: hostileString.map((s) => new TextEncoder().encode(s)) },
  { weight: 1, arbitrary: fc.constantFrom(Uint8Array.of(0xff), Uint8Array.of(0xc0, 0x80), Uint8Array.of(0x61, 0xed, 0xa0, 0x80)) },
);

const u64 = fc.bigInt({ min: 0n, max: (1n << 64n) - 1n });
const i64 = fc.bigInt({ min: -(1n << 63n), max: (1n << 63n) - 1n });

type Writer = (w: BinaryWriter) => void;

function scalarWriter(t: ScalarType): fc.Arbitrary<[WireType, Writer]> {
  switch (t) {
    case ScalarType.STRING:
      return stringBytes.map((b) => [WireType.LengthDelimited, (w) => w.bytes(b)]);
    case ScalarType.BYTES:
      return fc.uint8Array({ maxLength: 64 }).map((b) => [WireType.LengthDelimited, (w) => w.bytes(b)]);
    case ScalarType.BOOL:
      return fc.boolean().map((v) => [WireType.Varint, (w) => w.bool(v)]);
    case ScalarType.DOUBLE:
      return fc.double().map((v) => [WireType.Bit64, (w) => w.double(v)]);
    case ScalarType.FLOAT:
      return fc.float().map((v) => [WireType.Bit32, (w) => w.float(v)]);
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return u64.map((v) => (t === ScalarType.UINT64 ? [WireType.Varint, (w) => w.uint64(v)] : [WireType.Bit64, (w) => w.fixed64(v)]));
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return i64.map((v) => (t === ScalarType.INT64 ? [WireType.Varint, (w) => w.int64(v)] : t === ScalarType.SINT64 ? [WireType.Varint, (w) => w.sint64(v)] : [WireType.Bit64, (w) => w.sfixed64(v)]));
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return fc.integer({ min: 0, max: 0xffffffff }).map((v) => (t === ScalarType.UINT32 ? [WireType.Varint, (w) => w.uint32(v)] : [WireType.Bit32, (w) => w.fixed32(v)]));
    default:
      return fc.integer({ min: -0x80000000, max: 0x7fffffff }).map((v) => (t === ScalarType.SINT32 ? [WireType.Varint, (w) => w.sint32(v)] : t === ScalarType.SFIXED32 ? [WireType.Bit32, (w) => w.sfixed32(v)] : [WireType.Varint, (w) => w.int32(v)]));
  }
}

function valueOf(f: DescField, depth: number): fc.Arbitrary<[WireType, Writer]> {
  const message = (m: DescMessage): fc.Arbitrary<[WireType, Writer]> => wireMessage(m, depth + 1).map((b) => [WireType.LengthDelimited, (w) => w.bytes(b)]);
  switch (f.fieldKind) {
    case "scalar":
      return scalarWriter(f.scalar);
    case "enum":
      return fc.integer({ min: -5, max: 1000 }).map((v) => [WireType.Varint, (w) => w.int32(v)]);
    case "message":
      return message(f.message);
    case "list":
      return f.listKind === "message" ? message(f.message) : f.listKind === "enum" ? fc.integer({ min: -5, max: 1000 }).map((v) => [WireType.Varint, (w) => w.int32(v)]) : scalarWriter(f.scalar);
    case "map": {
      const key = scalarWriter(f.mapKey);
      const value = f.mapKind === "message" ? message(f.message) : f.mapKind === "enum" ? fc.integer({ min: -5, max: 1000 }).map((v): [WireType, Writer] => [WireType.Varint, (w) => w.int32(v)]) : scalarWriter(f.scalar);
      return fc.tuple(key, value).map(([[kt, kw], [vt, vw]]): [WireType, Writer] => [
        WireType.LengthDelimited,
        (w) => {
          const e = new BinaryWriter();
          e.tag(1, kt);
          kw(e);
          e.tag(2, vt);
          vw(e);
          w.bytes(e.finish());
        },
      ]);
    }
  }
}

/** Wire bytes of `schema` with random fields (a repeated field 0..4 times), depth-limited. */
export function wireMessage(schema: DescMessage, depth = 0): fc.Arbitrary<Uint8Array> {
  // Depth and width stay small: a nested message per field at every level would grow geometrically.
  const fields = depth > 2 ? [] : schema.fields;
  if (fields.length === 0) return fc.constant(new Uint8Array(0));
  const one = fc.constantFrom(...fields).chain((f) => {
    const repeated = f.fieldKind === "list" || f.fieldKind === "map";
    return fc.array(valueOf(f, depth), { minLength: 1, maxLength: repeated && depth === 0 ? 4 : 1 }).map((vs) => vs.map(([t, wr]): Writer => (w) => {
      w.tag(f.number, t);
      wr(w);
    }));
  });
  return fc.array(one, { maxLength: depth === 0 ? Math.min(8, fields.length + 2) : 2 }).map((groups) => {
    const w = new BinaryWriter();
    for (const g of groups) for (const wr of g) wr(w);
    return w.finish();
  });
}

export interface FuzzCase {
  readonly method: DescMethod;
  readonly kind: "structured" | "random" | "truncated" | "bad-frame";
  readonly body: Buffer;
}

/**
 * Per-method bytes appended to every structured or random request so the
 * request is refused whatever else it says — for methods where a valid
 * request is an operator's real change (UpdatePolicy) or signals a process
 * (StopOrphan). Protobuf merges a repeated singular field, last wins.
 */
export type Postfixes = Readonly<Record<string, Uint8Array>>;

/** One hostile request to one of `svc`'s methods. */
export function fuzzCase(svc: DescService, postfixes: Postfixes = {}): fc.Arbitrary<FuzzCase> {
  return fc.constantFrom(...svc.methods).chain((method) => {
    const post = postfixes[method.name] ?? new Uint8Array(0);
    const withPost = (b: Uint8Array): Buffer => Buffer.concat([b, post]);
    const structured = wireMessage(method.input).map((b): FuzzCase => ({ method, kind: "structured", body: frame(withPost(b)) }));
    const random = fc.uint8Array({ maxLength: 128 }).map((b): FuzzCase => ({ method, kind: "random", body: frame(withPost(b)) }));
    // No filter: a method whose input has no fields only ever encodes to nothing (a filter would never pass).
    // The postfix after the cut too: a message cut at a field boundary is a valid, shorter request (an UpdatePolicy patch that really applies).
    const truncated = fc.tuple(wireMessage(method.input), fc.nat()).map(([b, cut]): FuzzCase => ({ method, kind: "truncated", body: frame(withPost(b.subarray(0, b.length === 0 ? 0 : cut % b.length))) }));
    const badFrame = fc.oneof(
      fc.uint8Array({ maxLength: 9 }).map((b) => Buffer.from(b)), // raw bytes: a partial or garbage prefix
      fc.uint8Array({ maxLength: 32 }).map((b) => frame(b, { compressed: true })),
      fc.tuple(fc.uint8Array({ maxLength: 32 }), fc.integer({ min: 33, max: 0x7fffffff })).map(([b, n]) => frame(b, { declaredLength: n })),
      fc.tuple(fc.uint8Array({ maxLength: 8 }), fc.uint8Array({ maxLength: 8 })).map(([a, b]) => Buffer.concat([frame(withPost(a)), frame(withPost(b))])),
      fc.constant(Buffer.alloc(0)),
    ).map((body): FuzzCase => ({ method, kind: "bad-frame", body }));
    return fc.oneof({ weight: 4, arbitrary: structured }, { weight: 2, arbitrary: random }, { weight: 2, arbitrary: truncated }, { weight: 2, arbitrary: badFrame });
  });
}

/** Sends every case, `concurrency` at a time; streaming methods get a short deadline and are cancelled after their first reply bytes. */
export async function fire(raw: RawGrpc, cases: readonly FuzzCase[], concurrency = 32): Promise<RawOutcome[]> {
  const out: RawOutcome[] = new Array<RawOutcome>(cases.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    for (;;) {
      const i = next++;
      const c = cases[i];
      if (c === undefined) return;
      const streaming = c.method.methodKind === "server_streaming";
      out[i] = await raw.call(methodPath(c.method), c.body, { timeoutMs: streaming ? 100 : 20_000, ...(streaming ? { cancelAfterReplyBytes: 1 } : {}) });
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return out;
}

/** gRPC codes a server may answer hostile input with: anything but UNKNOWN and INTERNAL (a crash or an unmapped error). */
const unclear = new Set([2, 13]);

/**
 * Why an answer is not a clear status, or undefined when it is: a grpc-status
 * from 0..16 other than UNKNOWN/INTERNAL with a message when not OK, or (for
 * a stream this client cancelled after its first reply) a cancel.
 */
export function unclearAnswer(o: RawOutcome, cancelledByUs: boolean, compressedFlag = false): string | undefined {
  if (o.status === undefined) return cancelledByUs && o.replyBytes > 0 ? undefined : `no grpc-status (HTTP ${String(o.httpStatus)}, RST ${String(o.rstCode)})`;
  if (!Number.isInteger(o.status) || o.status < 0 || o.status > 16) return `grpc-status ${String(o.status)} is not a gRPC code`;
  // A message flagged compressed with no encoding negotiated is INTERNAL in the gRPC
  // protocol (grpc-go, grpc-js and the lean server alike), saying so.
  if (compressedFlag && o.status === 13 && /compress/i.test(o.message)) return undefined;
  if (unclear.has(o.status)) return `grpc-status ${String(o.status)}: ${o.message}`;
  if (o.status !== 0 && o.message === "") return `grpc-status ${String(o.status)} without a message`;
  return undefined;
}

/**
 * The shortest case encoding a repeated field of `method`'s input (top level,
 * or one level down) 10^6 times: empty messages, empty strings, or a packed
 * run of zeros. undefined when the input has no repeated field.
 */
export function millionElements(method: DescMethod): Buffer | undefined {
  const n = 1_000_000;
  const run = (f: DescField): Uint8Array | undefined => {
    if (f.fieldKind !== "list" && f.fieldKind !== "map") return undefined;
    const packed = f.fieldKind === "list" && f.listKind !== "message" && !(f.listKind === "scalar" && (f.scalar === ScalarType.STRING || f.scalar === ScalarType.BYTES));
    const w = new BinaryWriter();
    if (packed) {
      w.tag(f.number, WireType.LengthDelimited).bytes(new Uint8Array(n));
      return w.finish();
    }
    const one = new BinaryWriter().tag(f.number, WireType.LengthDelimited).bytes(new Uint8Array(0)).finish();
    const out = new Uint8Array(one.length * n);
    for (let i = 0; i < n; i++) out.set(one, i * one.length);
    return out;
  };
  for (const f of method.input.fields) {
    const r = run(f);
    if (r !== undefined) return frame(r);
  }
  for (const f of method.input.fields) {
    if (f.fieldKind !== "message") continue;
    for (const g of f.message.fields) {
      const r = run(g);
      if (r !== undefined) return frame(new BinaryWriter().tag(f.number, WireType.LengthDelimited).bytes(r).finish());
    }
  }
  return undefined;
}
