import { Bucket, type KV, type KvEntry } from "@nats-io/kv";
import { isPlanted, raceSignal, type Clock } from "@warden/common";

/** A takeover lost to another member's claim on the same revision: like a compare-and-set refusal. */
export class LeaseTakenError extends Error {
  constructor(
    readonly claimKey: string,
    readonly holder: string | null,
  ) {
    super(`lease takeover already claimed (${claimKey}, by ${holder ?? "a deleted claim"})`);
    this.name = "LeaseTakenError";
  }
}

/** The key that guards a takeover of `key` from `revision`. */
export function leaseClaimKey(key: string, revision: number): string {
  return `claim.${key}.${String(revision)}`;
}

function holderOf(e: KvEntry): string | null {
  if (e.operation !== "PUT") return null;
  try {
    const v = e.json<{ holder?: unknown }>();
    return typeof v.holder === "string" ? v.holder : "?";
  } catch {
    return "?";
  }
}

/** Deeper than any run of claimers that died between their claim and their update. */
const maxChain = 64;

/**
 * The claim links of a bucket, read and removed through its stream (the KV
 * API can only leave a delete marker per key, which would pile up one per
 * takeover for ever).
 */
export interface ClaimLinks {
  /** The keys (not subjects) that start with `prefix`, from the stream's per-subject counts (no consumer). */
  list(prefix: string, timeoutMs: number): Promise<readonly string[]>;
  /** Removes `key`'s messages with a stream sequence below `beforeSeq`, leaving no marker. */
  purgeBelow(key: string, beforeSeq: number, timeoutMs: number): Promise<void>;
}

/** ClaimLinks over a real bucket's stream (undefined for anything else: an in-memory test double). */
export function bucketClaimLinks(kv: KV): ClaimLinks | undefined {
  if (!(kv instanceof Bucket)) return undefined;
  const prefix = `$KV.${kv.bucket}.`;
  const timeout = (ms: number): AbortSignal => AbortSignal.timeout(ms);
  return {
    async list(keyPrefix, timeoutMs) {
      const info = await raceSignal(kv.jsm.streams.info(kv.stream, { subjects_filter: `${prefix}${keyPrefix}>` }), timeout(timeoutMs));
      return Object.keys(info.state.subjects ?? {}).map((subject) => subject.slice(prefix.length));
    },
    async purgeBelow(key, beforeSeq, timeoutMs) {
      await raceSignal(kv.jsm.streams.purge(kv.stream, { filter: `${prefix}${key}`, seq: beforeSeq }), timeout(timeoutMs));
    },
  };
}

export interface LeaseClaimsOptions {
  readonly kv: KV;
  /** The lease key. */
  readonly key: string;
  readonly clock: Pick<Clock, "now">;
  /** A claim seen unchanged this long (with the lease key still at its revision) is a dead claimer's: the lease. */
  readonly staleAfterMs: number;
  /** Where old claim links are removed after a won takeover. @default bucketClaimLinks(kv) */
  readonly links?: ClaimLinks;
  /** A removal of old links failed (harmless: the next won takeover removes them). */
  readonly onPruneError?: (err: unknown) => void;
}

/** `claim.<key>.` then the chain's revisions: `<revision>(.<revision>)*` (another key's claims can share the prefix when keys have dots). */
const chainTail = /^\d+(\.\d+)*$/;

/**
 * Takeovers of the lease key, at most one per revision. A clustered
 * nats-server 2.9 checks an update's expected revision on the stream leader
 * BEFORE replicating it, against what it has applied so far, so two updates
 * from one revision sent within one replication round are both accepted (two
 * standbys whose lease count ended together both won). A create (expected
 * revision 0) is checked again where it is applied, on every replica, so
 * exactly one create of a key succeeds: the takeover first creates the claim
 * key `claim.<key>.<revision>` (a plain put expecting revision 0, never
 * `kv.create`, which falls back to an update over a deleted key), and only
 * the member that created it updates the lease key, in the same call.
 *
 * A claimer that dies (or whose update fails) between the two writes would
 * leave the key unchanged and the claim taken for good: a claim seen
 * unchanged for `staleAfterMs` on this member's clock is stale, and the next
 * claim in the chain is `<claim key>.<its revision>`, again decided by one
 * create. One instance per keeper (it remembers when it first saw each claim).
 *
 * A stale claim stays stale (a claim key is only ever created, never
 * rewritten), so each attempt resumes at the deepest link this member has
 * reached instead of reading the whole chain again: on a slow stream (a
 * server just restarted, the machine loaded) an attempt that reads every link
 * grew by one read per failed takeover until none fit in its deadline, and the
 * lease was never taken again.
 *
 * Claim links are removed once they can no longer matter: after a won
 * takeover (its update of the lease key acknowledged, so the key is past
 * every revision an older claim guards), the winner removes every link of
 * the key stored before its own winning claim, in the background. A member
 * that still holds an older revision and finds such a link gone may create
 * it again, but its update of the lease key expects that older revision and
 * is refused: removing a link never lets a second takeover through. Links of
 * the winning takeover's own revision after its claim (none unless a claim
 * was taken as stale later) stay until the next won takeover; the bucket
 * holds the claims of about one takeover, not one per takeover ever made.
 */
export class LeaseClaims {
  private readonly firstSeen = new Map<string, { readonly revision: number; readonly atMs: number }>();
  private forRevision = -1;
  /** The deepest link of the chain for `forRevision` reached so far (every link before it was stale). */
  private deepest: { readonly key: string; readonly depth: number } | undefined;

  private readonly links: ClaimLinks | undefined;
  private pruning: Promise<void> = Promise.resolve();

  constructor(private readonly o: LeaseClaimsOptions) {
    this.links = o.links ?? bucketClaimLinks(o.kv);
  }

  /** Settles when the removal of old links started by the last won takeover has (never rejects). */
  pruned(): Promise<void> {
    return this.pruning;
  }

  /** Removes every claim link of the key stored before `wonClaimSeq` (see the class comment). */
  private async prune(wonClaimKey: string, wonClaimSeq: number, timeoutMs: number): Promise<void> {
    const links = this.links;
    if (links === undefined) return;
    const prefix = `claim.${this.o.key}.`;
    for (const key of await links.list(prefix, timeoutMs)) {
      if (key === wonClaimKey || !chainTail.test(key.slice(prefix.length))) continue;
      await links.purgeBelow(key, wonClaimSeq, timeoutMs);
    }
  }

  /**
   * Claims the takeover from `expectedRevision` and moves the key to `value`:
   * the key's new revision. Rejects with {@link LeaseTakenError} when another
   * claim stands, or as `kv.put` / `kv.update` do (wrong-last-sequence: a rival
   * claimed first or the key moved on), or with `signal`'s reason once it aborts
   * (no write is sent after that).
   */
  async take(value: string, expectedRevision: number, timeoutMs: number, signal?: AbortSignal): Promise<number> {
    // Planted bug "two-leaders-one-epoch": no claim, a bare update (accepted twice during a stream leader change).
    if (isPlanted("two-leaders-one-epoch")) return await this.o.kv.update(this.o.key, value, expectedRevision, timeoutMs);
    if (expectedRevision !== this.forRevision) {
      this.firstSeen.clear();
      this.forRevision = expectedRevision;
      this.deepest = undefined;
    }
    let claimKey = this.deepest?.key ?? leaseClaimKey(this.o.key, expectedRevision);
    for (let depth = this.deepest?.depth ?? 0; depth < maxChain; depth++) {
      const held = await this.o.kv.get(claimKey);
      if (held === null) {
        signal?.throwIfAborted();
        const revision = await this.o.kv.put(claimKey, value, { previousSeq: 0, timeout: timeoutMs });
        this.firstSeen.set(claimKey, { revision, atMs: this.o.clock.now() });
        // Past the caller's deadline the update is not sent: the claim goes stale and the chain moves on.
        signal?.throwIfAborted();
        const won = await this.o.kv.update(this.o.key, value, expectedRevision, timeoutMs);
        // Not awaited: the takeover acts at once; the removal is housekeeping.
        const claimed = claimKey;
        this.pruning = this.pruning.then(() => this.prune(claimed, revision, timeoutMs)).catch((err: unknown) => this.o.onPruneError?.(err));
        return won;
      }
      const nowMs = this.o.clock.now();
      const seen = this.firstSeen.get(claimKey);
      if (seen === undefined || seen.revision !== held.revision) {
        this.firstSeen.set(claimKey, { revision: held.revision, atMs: nowMs });
        throw new LeaseTakenError(claimKey, holderOf(held));
      }
      // Our own claim too: only the call that created it updates the key, so a retry never races a rival's.
      if (nowMs - seen.atMs < this.o.staleAfterMs) throw new LeaseTakenError(claimKey, holderOf(held));
      claimKey = `${claimKey}.${String(held.revision)}`;
      this.deepest = { key: claimKey, depth: depth + 1 };
    }
    throw new LeaseTakenError(claimKey, null);
  }
}
