import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { undecodableRequest } from "@warden/grpc";

/**
 * Pass-through encoding of Predict for the data-plane listener: the
 * coordinator reads only `PredictRequest.model` and forwards the
 * `PredictOptions` bytes as they came, with `ModelIdentity` appended (for a
 * singular field the last occurrence wins, per the protobuf spec, so the
 * caller cannot override it); the backend's `Reply` bytes go back wrapped in
 * `PredictResponse` without being decoded. Field numbers: proto/warden/v1/
 * inference.proto and proto/backend/backend.proto.
 */
const requestModelField = 1;
const requestOptionsField = 2;
const modelIdentityField = 54;
const responseReplyField = 1;
const responseNodeIdField = 2;

export interface PredictRequestBytes {
  readonly model: string;
  /** The `PredictOptions` bytes with `ModelIdentity` appended (the model's backend-facing name, model-identity.ts). */
  readonly backendRequest: Uint8Array;
}

/** The model name a request's bytes carry, strictly UTF-8 (as the main port's decode reads it). */
const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * The model name in `bytes[from, to)`. Model names are ASCII ids: an ASCII
 * name in a Buffer (the lean server's request) is read as latin1, which is the
 * same text, without a TextDecoder call and a subarray per call; anything else
 * goes through the strict decoder.
 */
function modelName(bytes: Uint8Array, from: number, to: number): string {
  if (bytes instanceof Buffer) {
    let ascii = true;
    for (let i = from; i < to; i++) {
      if ((bytes[i] ?? 0) >= 0x80) {
        ascii = false;
        break;
      }
    }
    if (ascii) return bytes.toString("latin1", from, to);
  }
  return utf8.decode(bytes.subarray(from, to));
}

/** Wire types as numbers (the walker compares a tag's low bits; @bufbuild's WireType is an enum). */
const wire = { varint: 0, bit64: 1, lengthDelimited: 2, startGroup: 3, endGroup: 4, bit32: 5 } as const;

/** How deep groups may nest in the options before the request is refused (protobuf's usual recursion limit). */
const maxGroupDepth = 100;

/**
 * A cursor over protobuf wire format that only walks it: tags, varints and
 * lengths are read in place, nothing is decoded or allocated. It runs on
 * every data-plane Predict, where @bufbuild's BinaryReader (a DataView and a
 * tuple per tag) was a visible share of the call. Throws on anything its
 * BinaryReader would refuse: a truncated field, field number 0, wire type 6
 * or 7, an end-group without its start.
 */
class WireWalker {
  pos = 0;
  constructor(
    private readonly buf: Uint8Array,
    private readonly end: number,
  ) {}

  /** A varint of at most 32 significant bits (tags, lengths), unsigned. */
  uint32(): number {
    const buf = this.buf;
    let value = 0;
    for (let shift = 0; shift < 35; shift += 7) {
      if (this.pos >= this.end) throw new Error("premature EOF");
      const b = buf[this.pos++] ?? 0;
      value += (b & 0x7f) * 2 ** shift;
      if ((b & 0x80) === 0) return value % 2 ** 32;
    }
    // Longer varints (a negative int32 written as 10 bytes): the rest is skipped, the low 32 bits kept.
    for (let i = 5; i < 10; i++) {
      if (this.pos >= this.end) throw new Error("premature EOF");
      if (((buf[this.pos++] ?? 0) & 0x80) === 0) return value % 2 ** 32;
    }
    throw new Error("invalid varint");
  }

  /** The next tag: field number × 8 + wire type, checked. */
  tag(): number {
    const t = this.uint32();
    if (t < 8 || (t & 7) > 5) throw new Error(`illegal tag: field no ${String(Math.floor(t / 8))} wire type ${String(t & 7)}`);
    return t;
  }

  /** Skips one field's value (a whole group for a start-group tag). */
  skip(tag: number, depth: number): void {
    switch (tag & 7) {
      case wire.varint:
        for (;;) {
          if (this.pos >= this.end) throw new Error("premature EOF");
          if (((this.buf[this.pos++] ?? 0) & 0x80) === 0) break;
        }
        break;
      case wire.bit64:
        this.pos += 8;
        break;
      case wire.bit32:
        this.pos += 4;
        break;
      case wire.lengthDelimited: {
        // Not `pos += uint32()`: that reads pos before uint32 moves it.
        const len = this.uint32();
        this.pos += len;
        break;
      }
      case wire.startGroup: {
        if (depth >= maxGroupDepth) throw new Error("groups nested too deep");
        for (;;) {
          const t = this.tag();
          if ((t & 7) === wire.endGroup) {
            if (t >>> 3 !== tag >>> 3) throw new Error("invalid end group tag");
            break;
          }
          this.skip(t, depth + 1);
        }
        break;
      }
      default:
        throw new Error(`cant skip wire type ${String(tag & 7)}`);
    }
    if (this.pos > this.end) throw new Error("premature EOF");
  }
}

/** Walks a message's fields without decoding them: throws when the bytes are not protobuf wire format. */
function checkWireFormat(bytes: Uint8Array, from: number, to: number): void {
  const w = new WireWalker(bytes, to);
  w.pos = from;
  while (w.pos < to) w.skip(w.tag(), 0);
}

/** ModelIdentity's tag and value per identity, encoded once: the handful of configured models. */
const identityBytes = new Map<string, Uint8Array>();
/** Bound on identityBytes (identities come from the model table, not from callers; a reload may add more). */
const maxIdentities = 1024;

function identityField(identity: string): Uint8Array {
  let b = identityBytes.get(identity);
  if (b === undefined) {
    b = new BinaryWriter().tag(modelIdentityField, WireType.LengthDelimited).string(identity).finish();
    if (identityBytes.size >= maxIdentities) identityBytes.clear();
    identityBytes.set(identity, b);
  }
  return b;
}

/**
 * Reads `model`, keeps the options bytes (several occurrences merge, as
 * protobuf merges them). Bytes that are not a PredictRequest — truncated,
 * not wire format (the options too: their fields are walked, not decoded),
 * or a model that is not UTF-8 — are INVALID_ARGUMENT, as on the main port.
 * Whether each options field has its declared type is the backend's to check.
 */
export function splitPredictRequest(bytes: Uint8Array, identityOf: (model: string) => string = (m) => m): PredictRequestBytes {
  const w = new WireWalker(bytes, bytes.length);
  let model = "";
  // The options' [start, end) spans, flat; almost always one.
  const spans: number[] = [];
  let optionsBytes = 0;
  try {
    while (w.pos < bytes.length) {
      const t = w.tag();
      if (t === (requestModelField << 3) + WireType.LengthDelimited || t === (requestOptionsField << 3) + WireType.LengthDelimited) {
        const len = w.uint32();
        const from = w.pos;
        const to = from + len;
        if (to > bytes.length) throw new Error("premature EOF");
        w.pos = to;
        if (t >>> 3 === requestModelField) model = modelName(bytes, from, to);
        else {
          checkWireFormat(bytes, from, to);
          spans.push(from, to);
          optionsBytes += len;
        }
      } else w.skip(t, 0);
    }
  } catch (err) {
    throw undecodableRequest("warden.v1.PredictRequest", err);
  }
  const identity = identityField(identityOf(model));
  const backendRequest = new Uint8Array(optionsBytes + identity.length);
  let at = 0;
  for (let i = 0; i < spans.length; i += 2) {
    const from = spans[i] ?? 0;
    const to = spans[i + 1] ?? 0;
    backendRequest.set(bytes.subarray(from, to), at);
    at += to - from;
  }
  backendRequest.set(identity, at);
  return { model, backendRequest };
}

/** node_id's tag, length and value per node, encoded once (bounded as identityBytes; node ids come from registration, not callers). */
const nodeIdBytes = new Map<string, Uint8Array>();

function nodeIdField(nodeId: string): Uint8Array {
  let b = nodeIdBytes.get(nodeId);
  if (b === undefined) {
    b = new BinaryWriter().tag(responseNodeIdField, WireType.LengthDelimited).string(nodeId).finish();
    if (nodeIdBytes.size >= maxIdentities) nodeIdBytes.clear();
    nodeIdBytes.set(nodeId, b);
  }
  return b;
}

/** Bytes of `n` as a varint. */
function varintBytes(n: number): number {
  let len = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 0x80);
    len++;
  }
  return len;
}

/**
 * `PredictResponse { reply = <the backend's Reply bytes>, node_id }`, written
 * straight into one buffer of the exact size (per data-plane call: no
 * BinaryWriter and its chunk list).
 */
export function predictResponseBytes(reply: Uint8Array, nodeId: string): Uint8Array {
  const node = nodeIdField(nodeId);
  const out = new Uint8Array(1 + varintBytes(reply.length) + reply.length + node.length);
  out[0] = (responseReplyField << 3) | WireType.LengthDelimited;
  let at = 1;
  let n = reply.length;
  while (n >= 0x80) {
    out[at++] = (n % 0x80) | 0x80;
    n = Math.floor(n / 0x80);
  }
  out[at++] = n;
  out.set(reply, at);
  out.set(node, at + reply.length);
  return out;
}

/** `Reply.tokens` (proto/backend: field 2, int32). */
const replyTokensField = 2;

/**
 * The completion tokens a backend's `Reply` bytes report (`tokens`, the last
 * occurrence as protobuf reads it), walked in place like the request: the
 * data plane passes replies through undecoded. 0 when absent, negative or the
 * bytes are not wire format — a count for the dashboard's tokens per second,
 * never a reason to fail the call.
 */
export function replyTokens(reply: Uint8Array): number {
  const w = new WireWalker(reply, reply.length);
  let tokens = 0;
  try {
    while (w.pos < reply.length) {
      const t = w.tag();
      if (t === ((replyTokensField << 3) | wire.varint)) {
        const v = w.uint32();
        tokens = v >= 2 ** 31 ? 0 : v;
      } else w.skip(t, 0);
    }
  } catch {
    return 0;
  }
  return tokens;
}
