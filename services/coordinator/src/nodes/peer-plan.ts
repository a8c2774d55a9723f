/**
 * Who an agent fetches a digest from (services/agent/docs/artifacts.md,
 * "Peer-to-peer fetch"): a node that holds it, else one that is pulling it
 * now — each serving at most `fanout` pulls of the digest at once, so N
 * agents starting together form a tree (the first from the origin, the next
 * `fanout` from it, and so on) instead of all reading one peer or the origin.
 * Pure: the caller says who holds what and when a pull ends.
 */
export class PeerPlan {
  /** Digest → nodes pulling it now → the peer each was given (undefined = the origin). Insertion order = who started first. */
  private readonly pulling = new Map<string, Map<string, string | undefined>>();
  /** Digest → peer → pulls it serves now. */
  private readonly served = new Map<string, Map<string, number>>();

  constructor(private readonly fanout: number) {
    if (!Number.isInteger(fanout) || fanout < 1) throw new RangeError("fanout must be a positive integer");
  }

  /**
   * The peer `requester` should read `sha256` from, or undefined for the
   * origin; records the pull until {@link done}. `holders` are nodes that hold
   * the verified digest now (the caller's order is kept: preferred first).
   * A requester already pulling keeps its peer.
   */
  assign(sha256: string, requester: string, holders: Iterable<string>): string | undefined {
    let pulls = this.pulling.get(sha256);
    if (pulls?.has(requester) === true) return pulls.get(requester);
    let served = this.served.get(sha256);
    if (served === undefined) {
      served = new Map();
      this.served.set(sha256, served);
    }
    const counts = served;
    const free = (n: string): boolean => n !== requester && (counts.get(n) ?? 0) < this.fanout;
    let peer: string | undefined;
    for (const h of holders) {
      if (free(h)) {
        peer = h;
        break;
      }
    }
    if (peer === undefined && pulls !== undefined) {
      for (const n of pulls.keys()) {
        if (free(n)) {
          peer = n;
          break;
        }
      }
    }
    if (pulls === undefined) {
      pulls = new Map();
      this.pulling.set(sha256, pulls);
    }
    pulls.set(requester, peer);
    if (peer !== undefined) counts.set(peer, (counts.get(peer) ?? 0) + 1);
    return peer;
  }

  /** `requester`'s pull of `sha256` ended (done, failed or given up): its peer serves one fewer; it is no longer a source while pulling. */
  done(sha256: string, requester: string): void {
    const pulls = this.pulling.get(sha256);
    if (pulls?.has(requester) !== true) return;
    const peer = pulls.get(requester);
    pulls.delete(requester);
    const served = this.served.get(sha256);
    if (peer !== undefined && served !== undefined) {
      const c = (served.get(peer) ?? 1) - 1;
      if (c <= 0) served.delete(peer);
      else served.set(peer, c);
    }
    if (pulls.size === 0) this.pulling.delete(sha256);
    if (served?.size === 0 && pulls.size === 0) this.served.delete(sha256);
  }

  /** Digests with a pull in progress (bounded by the starts in flight). */
  size(): number {
    return this.pulling.size;
  }
}
