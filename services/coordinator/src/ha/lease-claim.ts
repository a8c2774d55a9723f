import type { KV, KvEntry } from "@nats-io/kv";
import { isPlanted, type Clock } from "@warden/common";

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

export interface LeaseClaimsOptions {
  readonly kv: KV;
  /** The lease key. */
  readonly key: string;
  readonly clock: Pick<Clock, "now">;
  /** A claim seen unchanged this long (with the lease key still at its revision) is a dead claimer's: the lease. */
  readonly staleAfterMs: number;
}

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
 */
export class LeaseClaims {
  private readonly firstSeen = new Map<string, { readonly revision: number; readonly atMs: number }>();
  private forRevision = -1;
  /** The deepest link of the chain for `forRevision` reached so far (every link before it was stale). */
  private deepest: { readonly key: string; readonly depth: number } | undefined;

  constructor(private readonly o: LeaseClaimsOptions) {}

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
        return await this.o.kv.update(this.o.key, value, expectedRevision, timeoutMs);
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
