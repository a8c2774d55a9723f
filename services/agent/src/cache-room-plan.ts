/**
 * The artifact cache's disk budget, without I/O: whether a pull (or an
 * unpacked bundle) has room, which files to evict (least recently used
 * first) to make it, and the most an install of unknown size can take.
 * artifact-cache-index.ts keeps the facts and performs the plan.
 */

/**
 * One thing the budget counts: a verified file (`final`), an unfinished
 * pull's file (`partial`) or an installed backend bundle's directory
 * (`bundle`, its on-disk size measured when it was installed or found).
 */
export interface CacheEntry {
  readonly sha256: string;
  readonly kind: "final" | "partial" | "bundle";
  readonly sizeBytes: number;
  /** Wall-clock ms of its last use by a start (its mtime for files and bundles found at startup). */
  readonly lastUsedMs: number;
}

export interface RoomQuestion {
  /** Bytes the pull still has to write (or an unpacked bundle takes on disk). */
  readonly needBytes: number;
  /** What `needBytes` are, for the no-room reason. @default "bytes to fetch" */
  readonly needLabel?: string;
  /** Bytes the cache's files hold now (finals and partials). */
  readonly heldBytes: number;
  /** Bytes other pulls in progress still have to write (room already promised). */
  readonly reservedBytes: number;
  /** The agent's disk budget for the cache; undefined = only the file system bounds it. */
  readonly budgetBytes: number | undefined;
  /** Free bytes of the cache's file system (statfs). */
  readonly fsFreeBytes: number;
  /** The cache's files, any order. */
  readonly entries: Iterable<CacheEntry>;
  /**
   * Whether an entry may not go: a digest a running or starting backend uses
   * (its artifacts and its bundle), or one a pull is writing.
   */
  readonly isProtected: (e: CacheEntry) => boolean;
}

export type RoomPlan =
  | { readonly t: "room"; readonly evict: readonly CacheEntry[] }
  | { readonly t: "no-room"; readonly reason: string };

/** Bytes the cache can take now without evicting: min(file system free, budget − held), less what other pulls were promised; never negative. */
export function roomBytes(q: Pick<RoomQuestion, "heldBytes" | "reservedBytes" | "budgetBytes" | "fsFreeBytes">): number {
  const byBudget = q.budgetBytes === undefined ? Number.POSITIVE_INFINITY : q.budgetBytes - q.heldBytes;
  return Math.max(0, Math.min(q.fsFreeBytes, byBudget) - q.reservedBytes);
}

/**
 * Room for `needBytes`: none to evict when it fits; else the unprotected
 * files in least-recently-used order (ties by digest, so a plan is
 * deterministic) until the deficit is covered — an evicted file frees its
 * bytes both within the budget and on the file system. When even evicting
 * every unprotected file is not enough, nothing is evicted (`no-room`), so a
 * pull that cannot happen never costs the cache a file.
 */
export function planRoom(q: RoomQuestion): RoomPlan {
  const deficit = q.needBytes - roomBytes(q);
  if (deficit <= 0) return { t: "room", evict: [] };
  const { candidates, protectedBytes } = split(q);
  candidates.sort((a, b) => a.lastUsedMs - b.lastUsedMs || (a.sha256 < b.sha256 ? -1 : a.sha256 > b.sha256 ? 1 : a.kind < b.kind ? -1 : 1));
  const evict: CacheEntry[] = [];
  let freed = 0;
  for (const e of candidates) {
    if (freed >= deficit) break;
    evict.push(e);
    freed += e.sizeBytes;
  }
  if (freed >= deficit) return { t: "room", evict };
  return { t: "no-room", reason: `${String(q.needBytes)} ${q.needLabel ?? "bytes to fetch"}; ${whyNoMore(q, freed, protectedBytes)}` };
}

/** The most the cache can take for one write: see roomToMake. */
export interface MakeableRoom {
  /** Room now plus every unprotected entry's bytes: planRoom finds room for exactly the needs up to this. */
  readonly bytes: number;
  /** The numbers behind it, for an error that names them (as planRoom's no-room reason does). */
  readonly reason: string;
}

/**
 * The most a write whose size is not known yet can take: the room now plus
 * what evicting every unprotected entry would free (it frees both budget and
 * file system). A bundle's unpacking is bounded by it before a byte is
 * written (backend-bundle.ts), so an install that cannot fit fails as early
 * as its size shows it, with nothing evicted. Consistent with planRoom:
 * `planRoom({ ...q, needBytes }).t === "room"` exactly when `needBytes <= bytes`.
 */
export function roomToMake(q: Omit<RoomQuestion, "needBytes" | "needLabel">): MakeableRoom {
  const { candidates, protectedBytes } = split(q);
  let evictable = 0;
  for (const e of candidates) evictable += e.sizeBytes;
  return { bytes: roomBytes(q) + evictable, reason: whyNoMore(q, evictable, protectedBytes) };
}

function split(q: Pick<RoomQuestion, "entries" | "isProtected">): { candidates: CacheEntry[]; protectedBytes: number } {
  const candidates: CacheEntry[] = [];
  let protectedBytes = 0;
  for (const e of q.entries) {
    if (q.isProtected(e)) protectedBytes += e.sizeBytes;
    else candidates.push(e);
  }
  return { candidates, protectedBytes };
}

function whyNoMore(q: Pick<RoomQuestion, "budgetBytes" | "heldBytes" | "fsFreeBytes" | "reservedBytes">, freed: number, protectedBytes: number): string {
  const budget = q.budgetBytes === undefined ? "no disk budget" : `a disk budget of ${String(q.budgetBytes)} bytes with ${String(q.heldBytes)} held`;
  return `${budget}, ${String(q.fsFreeBytes)} free on the file system${q.reservedBytes > 0 ? `, ${String(q.reservedBytes)} promised to other pulls` : ""}; evicting every file no backend uses would free ${String(freed)} (${String(protectedBytes)} in use)`;
}
