import type { InventoryEntry } from "./gen/warden/v1/types_pb.js";

/**
 * The digest of a whole inventory that delta heartbeats carry
 * (InventoryDelta.digest): the sum, modulo 2^64, of one 64-bit hash per
 * entry. A sum, so either side keeps it up to date in work proportional to
 * the change (subtract an entry's old hash, add its new one) and the order of
 * entries does not matter. It detects a base that drifted (a lost or
 * misapplied change), not forgery: a node already speaks only for itself.
 */
const mask64 = (1n << 64n) - 1n;

/** The empty inventory's digest. */
export const emptyInventoryDigest = 0n;

/** Every field the coordinator stores, in a fixed order; NUL cannot occur in any validated field. */
function canonical(e: InventoryEntry): string {
  const s = e.stopRequested;
  const at = e.startedAt;
  return [
    e.incarnation,
    e.model,
    e.address,
    String(e.pid),
    String(e.state),
    e.memoryBytes.toString(),
    e.gpuDevice,
    at === undefined ? "" : `${at.seconds.toString()}.${String(at.nanos)}`,
    s === undefined ? "" : `${s.incarnation}\u0001${s.reason}\u0001${s.at === undefined ? "" : `${s.at.seconds.toString()}.${String(s.at.nanos)}`}`,
    e.backend,
  ].join("\u0000");
}

/** Two 32-bit FNV-1a lanes with distinct offsets, each finished by murmur3's fmix32. */
function hash64(text: string): bigint {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ 0x9e3779b9;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
  }
  return (BigInt(fmix32(a)) << 32n) | BigInt(fmix32(b ^ text.length));
}

function fmix32(h0: number): number {
  let h = h0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** One entry's share of the digest. */
export function inventoryEntryHash(e: InventoryEntry): bigint {
  return hash64(canonical(e));
}

/** `digest` with an entry hash added (`sign` 1) or taken out (`sign` -1). */
export function digestWith(digest: bigint, entryHash: bigint, sign: 1 | -1): bigint {
  return (sign === 1 ? digest + entryHash : digest - entryHash) & mask64;
}

/** The digest of a whole inventory (order does not matter). */
export function inventoryDigest(entries: Iterable<InventoryEntry>): bigint {
  let d = emptyInventoryDigest;
  for (const e of entries) d = digestWith(d, inventoryEntryHash(e), 1);
  return d;
}
