import type { EventQueue } from "../kernel/event-queue.js";
import type { SimRandom } from "../kernel/sim-random.js";
import type { VirtualClock } from "../kernel/virtual-clock.js";

export type LeaseWriteResult = { readonly t: "ok"; readonly revision: number } | { readonly t: "wrong-revision" };

/**
 * The lease bucket's one key (services/coordinator/src/ha/lease-bucket.ts) as
 * a compare-and-set register with revisions (a KV revision is the stream
 * sequence: it only grows, across deletes too). Each coordinator process
 * reaches it over its own link, which a fault can cut: a request sent into a
 * cut link is lost (the keeper's deadline answers write-failed), an answer or
 * a watch delivery into one is lost too (the write may have happened). A
 * watch that comes back after a cut re-reads the key, as the keeper's does.
 */
export class SimLeaseStore {
  revision = 0;
  holder: string | null = null;
  private seq = 0;
  /** A stream leader change: no lease operation is answered until then (requests and answers lost). */
  private electingUntilMs = 0;
  /** Then, until this, a write expecting what the last accepted write expected is accepted too (once). */
  private staleCasUntilMs = 0;
  /** What the last accepted write expected (its kind and revision), while a second one may still match it. */
  private lastExpectation: string | undefined;
  private readonly claims = new Map<string, { readonly revision: number; readonly holder: string }>();
  /** Writes accepted on a revision already superseded (the double win of a stream leader change). */
  doubleAccepts = 0;
  /** The key's last writes (newest last, at most 4): what a leader change can take back. */
  private readonly history: { readonly revision: number; readonly holder: string | null }[] = [];
  /** Acknowledged writes of the key a leader change lost (the key went back). */
  lostWrites = 0;
  private readonly cutUntil = new Map<number, number>();
  private readonly watchers = new Map<number, (revision: number, holder: string | null) => void>();

  constructor(
    private readonly queue: EventQueue,
    private readonly clock: VirtualClock,
    private readonly rng: SimRandom,
    /** A write was accepted on a superseded revision (coverage). */
    private readonly onDoubleAccept: () => void = () => {},
    /** A leader change took acknowledged writes of the key back (coverage). */
    private readonly onLostWrites: () => void = () => {},
  ) {}

  reachable(member: number): boolean {
    const now = this.clock.now();
    return (this.cutUntil.get(member) ?? 0) <= now && this.electingUntilMs <= now;
  }

  /**
   * The lease stream loses its leader (a nats-server killed): nothing is
   * answered for `electionMs`; then, for `staleCasMs`, the new stream leader
   * may not have applied the last write yet, so a compare-and-set based on the
   * revision that write superseded is accepted too, with the next revision
   * (nats-server 2.9 under leader change: two writers both "won", with
   * consecutive revisions). Watches re-read when it is back.
   *
   * With `loseWrites`, 3 in 10 changes also lose the key's last one or two
   * writes, acknowledged as they were: the key goes back to an older revision
   * (the stream's sequence goes on). Seen with nats-server 2.9 under load: the
   * key went from 206 back to 204, and every member, taking 204 for a stale
   * read, tried to take over from 206 for minutes with no leader.
   */
  leaderChange(electionMs: number, staleCasMs: number, loseWrites = false): void {
    const now = this.clock.now();
    if (loseWrites && this.history.length >= 2 && this.rng.chance(0.3)) {
      const lost = Math.min(this.history.length - 1, this.rng.int(1, 2));
      this.history.splice(this.history.length - lost, lost);
      const back = this.history[this.history.length - 1];
      if (back !== undefined) {
        this.revision = back.revision;
        this.holder = back.holder;
        this.lostWrites += lost;
        this.onLostWrites();
      }
    }
    this.electingUntilMs = Math.max(this.electingUntilMs, now + electionMs);
    this.staleCasUntilMs = Math.max(this.staleCasUntilMs, this.electingUntilMs + staleCasMs);
    this.queue.push(this.electingUntilMs, "lease.stream-leader", () => {
      if (this.electingUntilMs > this.clock.now()) return;
      for (const m of this.watchers.keys()) if (this.reachable(m)) this.read(m);
    });
  }

  cut(member: number, untilMs: number): void {
    this.cutUntil.set(member, Math.max(this.cutUntil.get(member) ?? 0, untilMs));
    this.queue.push(untilMs, "lease.link-up", () => {
      if (this.reachable(member)) this.read(member);
    });
  }

  healAll(): void {
    const electing = this.electingUntilMs > this.clock.now();
    this.electingUntilMs = 0;
    this.staleCasUntilMs = 0;
    if (electing) for (const m of this.watchers.keys()) if (!this.cutUntil.has(m)) this.read(m);
    for (const m of [...this.cutUntil.keys()]) {
      this.cutUntil.set(m, 0);
      this.read(m);
    }
  }

  /** The member's watch (replaces an earlier one); the keeper reads once as it starts watching. */
  watch(member: number, deliver: (revision: number, holder: string | null) => void): void {
    this.watchers.set(member, deliver);
    this.read(member);
  }

  unwatch(member: number): void {
    this.watchers.delete(member);
  }

  private leg(member: number, label: string, fn: () => void): void {
    if (!this.reachable(member)) return;
    this.queue.push(this.clock.now() + 1 + this.rng.next() * 30, label, () => {
      if (this.reachable(member)) fn();
    });
  }

  /** A read of the key, delivered to the member's watch. */
  read(member: number): void {
    const snap = { revision: this.revision, holder: this.holder };
    this.leg(member, "lease.read", () => {
      this.watchers.get(member)?.(snap.revision, snap.holder);
    });
  }

  /**
   * A claim key of a takeover (lease-claim.ts `LeaseClaims`):
   * a put expecting no key, which the stream decides where it is applied, so
   * exactly one claim per key succeeds even during a leader change. It
   * takes a stream sequence like any write. `onResult` never runs if a leg is lost.
   */
  claim(member: number, key: string, holder: string, onResult: (r: LeaseWriteResult) => void): void {
    this.leg(member, "lease.claim", () => {
      const ok = !this.claims.has(key);
      const seq = ok ? ++this.seq : 0;
      if (ok) this.claims.set(key, { revision: seq, holder });
      this.leg(member, "lease.claim-answer", () => { onResult(ok ? { t: "ok", revision: seq } : { t: "wrong-revision" }); });
    });
  }

  /** A read of a claim key (lease-claim.ts reads each before it claims). */
  getClaim(member: number, key: string, onResult: (c: { readonly revision: number; readonly holder: string } | null) => void): void {
    this.leg(member, "lease.claim-get", () => {
      const c = this.claims.get(key) ?? null;
      this.leg(member, "lease.claim-get-answer", () => { onResult(c); });
    });
  }

  /** A read of the key through the stream leader (the keeper's read-back after a takeover). */
  get(member: number, onResult: (revision: number, holder: string | null) => void): void {
    this.leg(member, "lease.get", () => {
      const snap = { revision: this.revision, holder: this.holder };
      this.leg(member, "lease.get-answer", () => { onResult(snap.revision, snap.holder); });
    });
  }

  /** create (expects no key) or update (expects `expectedRevision`); `onResult` never runs if a leg is lost. */
  write(member: number, kind: "create" | "update", expectedRevision: number, holder: string, onResult: (r: LeaseWriteResult) => void): void {
    this.leg(member, "lease.write", () => {
      const expectation = `${kind} ${String(kind === "create" ? 0 : expectedRevision)}`;
      let ok = kind === "create" ? this.holder === null : this.revision === expectedRevision && this.revision > 0;
      if (!ok && this.clock.now() < this.staleCasUntilMs && this.lastExpectation === expectation) {
        // The stream's new leader had not applied the write that superseded this expectation.
        ok = true;
        this.doubleAccepts++;
        this.onDoubleAccept();
        this.lastExpectation = undefined;
      } else if (ok) this.lastExpectation = expectation;
      if (!ok) {
        this.leg(member, "lease.write-answer", () => { onResult({ t: "wrong-revision" }); });
        return;
      }
      this.revision = ++this.seq;
      this.holder = holder;
      this.history.push({ revision: this.revision, holder });
      if (this.history.length > 4) this.history.shift();
      const revision = this.revision;
      for (const m of this.watchers.keys()) {
        this.leg(m, "lease.watch", () => {
          this.watchers.get(m)?.(revision, holder);
        });
      }
      this.leg(member, "lease.write-answer", () => { onResult({ t: "ok", revision }); });
    });
  }
}
