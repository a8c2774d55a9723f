import { ScalarType, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { capExceeded } from "@warden/common";

/**
 * Elements one request may decode into: entries of repeated and map fields
 * (each packed number counts), nested messages and unknown fields, summed
 * over the whole request. The message size limit alone does not bound
 * decoding: a 2 MB request of 10^6 empty repeated messages decodes into
 * 10^6 objects (about 110 MB and 2 s of CPU), 50 MB into 25 times that. At
 * 100 000 a request costs at most about 11 MB and 0.2 s to decode, far above
 * any real one (a heartbeat carries at most ~10 000, a Predict a few hundred).
 */
export const defaultMaxRequestElements = 100_000;

class Budget {
  used = 0;
  constructor(
    readonly max: number,
    readonly typeName: string,
  ) {}

  take(n: number): void {
    this.used += n;
    if (this.used > this.max) throw capExceeded("request", `a ${this.typeName} of more than ${String(this.max)} repeated entries, nested messages and unknown fields is refused before decoding`);
  }
}

const byNumber = new WeakMap<DescMessage, ReadonlyMap<number, DescField>>();

function fieldsOf(schema: DescMessage): ReadonlyMap<number, DescField> {
  let m = byNumber.get(schema);
  if (m === undefined) {
    m = new Map(schema.fields.map((f) => [f.number, f]));
    byNumber.set(schema, m);
  }
  return m;
}

/** Numbers in a packed run: fixed-width by size, varints by their last bytes (high bit clear). */
function packedCount(scalar: ScalarType, bytes: Uint8Array): number {
  switch (scalar) {
    case ScalarType.DOUBLE:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return bytes.length >>> 3;
    case ScalarType.FLOAT:
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
      return bytes.length >>> 2;
    default: {
      let n = 0;
      for (const b of bytes) if (b < 0x80) n++;
      return n;
    }
  }
}

function scan(schema: DescMessage, bytes: Uint8Array, budget: Budget, depth: number): void {
  // Deeper than protobuf-es decodes (100): let the decoder answer it.
  if (depth > 100) return;
  const fields = fieldsOf(schema);
  const r = new BinaryReader(bytes);
  while (r.pos < r.len) {
    const [no, wt] = r.tag();
    const f = fields.get(no);
    if (f === undefined) {
      budget.take(1);
      r.skip(wt, no);
      continue;
    }
    switch (f.fieldKind) {
      case "list":
        if (wt === WireType.LengthDelimited) {
          const sub = r.bytes();
          if (f.listKind === "message") {
            budget.take(1);
            scan(f.message, sub, budget, depth + 1);
          } else if (f.listKind === "scalar" && (f.scalar === ScalarType.STRING || f.scalar === ScalarType.BYTES)) budget.take(1);
          else budget.take(packedCount(f.listKind === "enum" ? ScalarType.INT32 : f.scalar, sub));
        } else {
          budget.take(1);
          r.skip(wt, no);
        }
        break;
      case "map":
        budget.take(1);
        if (wt === WireType.LengthDelimited && f.mapKind === "message") scanMapEntry(f.message, r.bytes(), budget, depth + 1);
        else r.skip(wt, no);
        break;
      case "message":
        if (wt === WireType.LengthDelimited) {
          budget.take(1);
          scan(f.message, r.bytes(), budget, depth + 1);
        } else r.skip(wt, no);
        break;
      default:
        r.skip(wt, no);
    }
  }
}

function scanMapEntry(value: DescMessage, bytes: Uint8Array, budget: Budget, depth: number): void {
  const r = new BinaryReader(bytes);
  while (r.pos < r.len) {
    const [no, wt] = r.tag();
    if (no === 2 && wt === WireType.LengthDelimited) scan(value, r.bytes(), budget, depth);
    else r.skip(wt, no);
  }
}

/**
 * The elements `bytes` would decode into, as checkRequestElements counts them
 * (stopping past `max`). Never more than `bytes.length`: every element counted
 * spends at least one byte of its own (a tag, or a packed number's byte).
 */
export function requestElements(schema: DescMessage, bytes: Uint8Array, max: number = Number.MAX_SAFE_INTEGER): number {
  const budget = new Budget(max, schema.typeName);
  try {
    scan(schema, bytes, budget, 0);
  } catch (err) {
    if (budget.used <= budget.max) return budget.used;
    throw err;
  }
  return budget.used;
}

/**
 * Throws RESOURCE_EXHAUSTED (field `request`) when `bytes` would decode into
 * more than `maxElements` elements (see defaultMaxRequestElements), before
 * anything is allocated for them. Bytes that are not a well-formed message
 * are left to the decoder, which answers INVALID_ARGUMENT. A request no longer
 * in bytes than the budget cannot exceed it (requestElements) and is not
 * scanned: the usual request (a heartbeat, a Predict) costs nothing here.
 */
export function checkRequestElements(schema: DescMessage, bytes: Uint8Array, maxElements: number = defaultMaxRequestElements): void {
  if (bytes.length <= maxElements) return;
  requestElements(schema, bytes, maxElements);
}
