import { JetStreamApiCodes, JetStreamApiError } from "@nats-io/jetstream";
import { KvWatchInclude, type KV, type KvEntry } from "@nats-io/kv";
import type { QueuedIterator } from "@nats-io/transport-node";
import { deadlineSignal, invalidArgument, nullLogger, raceSignal, systemClock, type Cancel, type Clock, type Logger } from "@warden/common";
import {
  initialLease,
  isLeaderAt,
  leaseEpoch,
  nextLease,
  type LeaseConfig,
  type LeaseEffect,
  type LeaseInput,
  type LeaseState,
  type StepDownReason,
} from "@warden/lease";
import { leaseNamePattern } from "./lease-bucket.js";
import { LeaseClaims, LeaseTakenError } from "./lease-claim.js";

/** The lease key as last read or watched (who holds it, where it serves, which epoch). */
export interface LeaseEntry {
  readonly revision: number;
  /** null: the key is absent or deleted. */
  readonly holder: string | null;
  /** The holder's advertised host:port, when it wrote one. */
  readonly address: string | undefined;
  /** The holder's epoch: written on renewals; the revision itself for a term's first write. */
  readonly epoch: number;
}

export type LeaseChange =
  /** `previous`: the key as seen when this keeper became a candidate (undefined: it never existed). */
  | { readonly kind: "leader"; readonly epoch: number; readonly previous: LeaseEntry | undefined }
  | { readonly kind: "follower"; readonly epoch: number; readonly reason: StepDownReason | "stopped" };

export interface LeaseKeeperOptions {
  /** The lease bucket (see `openLeaseBucket`). */
  readonly kv: KV;
  /** @default "leader" */
  readonly key?: string;
  readonly config: LeaseConfig;
  readonly clock?: Clock;
  /**
   * Deadline of every KV call (write, read, watch start). A write past it counts
   * as outcome unknown, never as a win. @default 1000, bounds 50 to leaseMs − marginMs − 1
   */
  readonly opTimeoutMs?: number;
  /** Pause before a failed or ended watch is started again. @default 1000, bounds 50–60 000 */
  readonly rewatchMs?: number;
  /** Called on every change of leadership, in order, synchronously from the keeper. */
  readonly onChange?: (change: LeaseChange) => void;
  /** Called for every entry the read or the watch delivers (other holders' too), synchronously. */
  readonly onEntry?: (entry: LeaseEntry) => void;
  /** This member's advertised host:port, written with the lease so standbys know where the leader is. */
  readonly address?: string;
  readonly log?: Logger;
}

/** What the key holds: who wrote it, and when on their wall clock (for people; no decision reads it). */
interface LeaseValue {
  readonly holder: string;
  readonly wallMs: number;
  readonly address?: string;
  readonly epoch?: number;
}

function entryOf(e: KvEntry): LeaseEntry {
  const holder = holderOf(e);
  let address: string | undefined;
  let epoch = e.revision;
  if (holder !== null) {
    try {
      const v = e.json<Partial<LeaseValue>>();
      if (typeof v.address === "string" && v.address.length <= 300) address = v.address;
      if (typeof v.epoch === "number" && Number.isSafeInteger(v.epoch) && v.epoch > 0 && v.epoch <= e.revision) epoch = v.epoch;
    } catch {
      // unreadable: holderOf already said "?"
    }
  }
  return { revision: e.revision, holder, address, epoch };
}

function holderOf(e: KvEntry): string | null {
  if (e.operation !== "PUT") return null;
  try {
    const v = e.json<Partial<LeaseValue>>();
    return typeof v.holder === "string" ? v.holder : "?";
  } catch {
    return "?"; // unreadable: someone holds it, and it is not us
  }
}

function isWrongRevision(err: unknown): boolean {
  return (
    err instanceof LeaseTakenError ||
    err instanceof JetStreamApiError &&
    (err.code === JetStreamApiCodes.StreamWrongLastSequence || err.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown)
  );
}

/**
 * Drives the pure lease core (`@warden/lease`) over a NATS KV bucket: one owner
 * of the lease state, fed by write answers, the key's watch and its own timer.
 * Every KV call has a deadline and is cut short by `stop()`. `isLeader()` asks
 * the clock, so after a pause it is false before the step-down tick runs.
 */
export class LeaseKeeper {
  private state: LeaseState;
  private readonly clock: Clock;
  private readonly key: string;
  private readonly opTimeoutMs: number;
  private readonly rewatchMs: number;
  private readonly log: Logger;
  private readonly stopping = new AbortController();
  private cancelTick: Cancel = () => {};
  private cancelRewatch: Cancel = () => {};
  private cancelReread: Cancel = () => {};
  private writeSeq = 0;
  /** The one write whose answer the core waits for; answers to others are dropped. */
  private pendingWrite: number | undefined;
  private watchSeq = 0;
  private watcher: QueuedIterator<unknown> | undefined;
  private readonly inFlight = new Set<Promise<unknown>>();
  private lastEntry: LeaseEntry | undefined;
  private renewalsOk = 0;
  private renewalsFailed = 0;
  /** The key as seen when the current candidacy began: the previous holder if it wins. */
  private entryAtCandidacy: LeaseEntry | undefined;
  private readonly claims: LeaseClaims;
  private cancelProbe: Cancel = () => {};
  private probing = false;

  private constructor(private readonly o: LeaseKeeperOptions) {
    this.clock = o.clock ?? systemClock;
    this.key = o.key ?? "leader";
    this.opTimeoutMs = o.opTimeoutMs ?? 1_000;
    this.rewatchMs = o.rewatchMs ?? 1_000;
    this.log = (o.log ?? nullLogger).child({ component: "lease-keeper", holder: o.config.holder });
    if (!leaseNamePattern.test(this.key)) throw invalidArgument("key", "must be 1–128 of [-/_=.a-zA-Z0-9]");
    const maxOpMs = o.config.leaseMs - o.config.marginMs - 1;
    if (!Number.isInteger(this.opTimeoutMs) || this.opTimeoutMs < 50 || this.opTimeoutMs > maxOpMs) {
      throw invalidArgument("opTimeoutMs", `must be an integer from 50 to ${String(maxOpMs)} ms (leaseMs − marginMs − 1)`);
    }
    if (!Number.isInteger(this.rewatchMs) || this.rewatchMs < 50 || this.rewatchMs > 60_000) {
      throw invalidArgument("rewatchMs", "must be an integer from 50 to 60000 ms");
    }
    this.claims = new LeaseClaims({ kv: o.kv, key: this.key, clock: this.clock, staleAfterMs: o.config.leaseMs, onPruneError: (err) => { this.log.debug("old lease claims not removed", { err: String(err) }); } });
    const first = initialLease();
    this.state = first.state;
    this.apply(first.effects, first.wakeAtMs);
    this.scheduleProbe();
  }

  /**
   * A follower reads the key once every renewMs: a read with no answer tells
   * the core the stream is silent (so the leader's silence is not counted
   * against it), the next answer that it is back. A watch alone cannot say so:
   * it delivers nothing when nothing is written, down or not.
   */
  private scheduleProbe(): void {
    if (this.stopping.signal.aborted) return;
    this.cancelProbe = this.clock.setTimer(this.o.config.renewMs, () => {
      this.scheduleProbe();
      if (this.probing || this.state.kind !== "follower") return;
      this.probing = true;
      this.bounded("lease probe", () => this.o.kv.get(this.key)).then(
        (e) => {
          this.probing = false;
          this.observe(e);
        },
        (err: unknown) => {
          this.probing = false;
          if (this.stopping.signal.aborted) return;
          this.log.debug("lease probe got no answer", { err: String(err) });
          this.feed({ kind: "read-failed", nowMs: this.clock.now() });
        },
      );
    });
  }

  /** Starts competing for the lease at once; validates the options whole first. */
  static start(options: LeaseKeeperOptions): LeaseKeeper {
    return new LeaseKeeper(options);
  }

  /** True while this coordinator may act as leader (checked against the clock now). */
  isLeader(): boolean {
    return !this.stopping.signal.aborted && isLeaderAt(this.o.config, this.state, this.clock.now());
  }

  /** Renewal writes (updates sent while leading) acknowledged and failed so far. */
  renewals(): { readonly ok: number; readonly failed: number } {
    return { ok: this.renewalsOk, failed: this.renewalsFailed };
  }

  /** The key as last read or watched. */
  entry(): LeaseEntry | undefined {
    return this.lastEntry;
  }

  /** The epoch to put on commands while {@link isLeader}, else undefined. */
  epoch(): number | undefined {
    return this.isLeader() ? leaseEpoch(this.state) : undefined;
  }

  /**
   * Stops competing: no more writes, timers or watch; waits for calls in
   * flight to settle (each is bounded by its deadline, and cut short here).
   * The key is left as it is, so a standby takes over one lease later.
   */
  async stop(): Promise<void> {
    if (this.stopping.signal.aborted) return;
    const epoch = leaseEpoch(this.state);
    this.stopping.abort(new Error("lease keeper stopped"));
    this.cancelTick();
    this.cancelProbe();
    this.cancelRewatch();
    this.cancelReread();
    this.watcher?.stop();
    this.watcher = undefined;
    if (epoch !== undefined) this.notify({ kind: "follower", epoch, reason: "stopped" });
    await Promise.allSettled([...this.inFlight]);
  }

  private feed(input: LeaseInput): void {
    if (this.stopping.signal.aborted) return;
    const s = nextLease(this.o.config, this.state, input);
    if (s.state.kind === "candidate" && this.state.kind !== "candidate") this.entryAtCandidacy = this.lastEntry;
    this.state = s.state;
    this.apply(s.effects, s.wakeAtMs);
  }

  private apply(effects: readonly LeaseEffect[], wakeAtMs: number | undefined): void {
    for (const e of effects) {
      switch (e.kind) {
        case "create":
        case "update":
          this.write(e);
          break;
        case "watch":
          this.startWatch();
          break;
        case "become-leader":
          this.log.info("lease won: leading", { epoch: e.epoch });
          this.notify({ kind: "leader", epoch: e.epoch, previous: this.entryAtCandidacy });
          break;
        case "step-down":
          this.log.warn("lease lost: stepping down", { epoch: e.epoch, reason: e.reason });
          this.notify({ kind: "follower", epoch: e.epoch, reason: e.reason });
          break;
      }
    }
    this.cancelTick();
    if (wakeAtMs !== undefined && !this.stopping.signal.aborted) {
      this.cancelTick = this.clock.setTimer(Math.max(0, wakeAtMs - this.clock.now()), () => {
        this.feed({ kind: "tick", nowMs: this.clock.now() });
      });
    }
  }

  private notify(change: LeaseChange): void {
    try {
      this.o.onChange?.(change);
    } catch (err) {
      this.log.error("lease onChange callback threw", { err: String(err) });
    }
  }

  /** Runs `op` under a deadline that `stop()` also cuts; tracked so `stop()` can wait for it. */
  private bounded<T>(what: string, op: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const d = deadlineSignal(this.clock, this.opTimeoutMs, what, this.stopping.signal);
    // A synchronous throw (nats.js checks some arguments eagerly) becomes a rejection like any other failure.
    const p = raceSignal(
      Promise.resolve().then(() => op(d.signal)),
      d.signal,
    ).finally(() => {
      d.cleanup();
      this.inFlight.delete(p);
    });
    this.inFlight.add(p);
    return p;
  }

  private write(e: Extract<LeaseEffect, { kind: "create" | "update" }>): void {
    const id = ++this.writeSeq;
    this.pendingWrite = id;
    const epoch = leaseEpoch(this.state);
    const value = JSON.stringify({ holder: this.o.config.holder, wallMs: this.clock.wallNow(), ...(this.o.address === undefined ? {} : { address: this.o.address }), ...(epoch === undefined ? {} : { epoch }) } satisfies LeaseValue);
    const kv = this.o.kv;
    const renewal = this.state.kind === "leader";
    // An ex-leader retaking its own key retries every retryMs (lease-core.ts): quiet like a renewal.
    const resuming = this.state.kind === "candidate" && this.state.resuming === true;
    // A takeover goes through a claim key (see LeaseClaims: a bare update from one revision can be
    // accepted twice by a clustered nats-server 2.9); a renewal moves on from our own revision.
    const call =
      e.kind === "create"
        ? () => kv.create(this.key, value)
        : renewal
          ? () => kv.update(this.key, value, e.expectedRevision, this.opTimeoutMs)
          : (signal: AbortSignal) => this.claims.take(value, e.expectedRevision, this.opTimeoutMs, signal);
    const answer = (input: (nowMs: number) => LeaseInput): void => {
      if (this.pendingWrite !== id) return;
      this.pendingWrite = undefined;
      this.feed(input(this.clock.now()));
    };
    this.bounded(`lease ${e.kind}`, call)
      .then(async (revision) => {
        // A win is confirmed before it is acted on: the key read back through the stream leader
        // must not show someone else's later write (the core then refuses the win). A read that
        // fails leaves the outcome unknown, never a win.
        if (!renewal && this.pendingWrite === id) this.observe(await this.bounded("lease read-back", () => kv.get(this.key)));
        return revision;
      })
      .then(
        (revision) => {
          if (renewal) this.renewalsOk++;
          // Our own write is the key's newest state: record it before the core hears of it, without
          // waiting for the watch, which after a NATS server loss can lag or be restarting (GetHaStatus
          // then named the term before a resume). Only the awaited write's answer is news.
          if (this.pendingWrite === id) this.record({ revision, holder: this.o.config.holder, address: this.o.address, epoch: epoch ?? revision });
          answer((nowMs) => ({ kind: "write-ok", revision, nowMs }));
        },
        (err: unknown) => {
          if (renewal) this.renewalsFailed++;
          if (isWrongRevision(err)) {
            // A lost takeover is news to an operator reading why no member leads; at most one per lease.
            if (!renewal) this.log.info("lease takeover refused", { expectedRevision: e.kind === "update" ? e.expectedRevision : 0, err: String(err) });
            answer((nowMs) => ({ kind: "write-wrong-revision", nowMs }));
            if (e.kind === "update") this.checkRewound(e.expectedRevision);
          } else {
            // Takeover attempts come at most once a lease; renewals and resumes retry every retryMs and stay quiet.
            if (renewal || resuming) this.log.debug(resuming ? "lease resume failed" : "lease write failed", { kind: e.kind, err: String(err) });
            else this.log.warn("lease takeover failed", { kind: e.kind, expectedRevision: e.kind === "update" ? e.expectedRevision : 0, err: String(err) });
            answer((nowMs) => ({ kind: "write-failed", nowMs }));
          }
        },
      );
  }

  private observe(e: KvEntry | null, rewound = false): void {
    const entry: LeaseEntry = e === null ? { revision: 0, holder: null, address: undefined, epoch: 0 } : entryOf(e);
    this.record(entry, rewound);
    this.feed({ kind: "entry", revision: entry.revision, holder: entry.holder, nowMs: this.clock.now(), ...(rewound ? { rewound: true } : {}) });
  }

  /**
   * After an update from `expectedRevision` was refused: reads the key through
   * the stream leader, and if it is OLDER than the revision we wrote from, the
   * stream lost writes in a leader change (seen with nats-server 2.9 under
   * load: the key went back from 206 to 204, and every member, taking 204 for
   * a stale read, retried from 206 for minutes with no leader). The core then
   * takes the older key as the truth.
   */
  private checkRewound(expectedRevision: number): void {
    this.bounded("lease read after refusal", () => this.o.kv.get(this.key)).then(
      (e) => {
        const revision = e === null ? 0 : e.revision;
        if (revision >= expectedRevision) return; // the usual refusal: someone wrote since, and the watch says so
        this.log.warn("lease key went back: the stream lost writes in a leader change; following the key as it is", { expectedRevision, revision });
        this.observe(e, true);
      },
      (err: unknown) => {
        this.log.debug("lease read after refusal failed", { err: String(err) });
      },
    );
  }

  /** Keeps the newest entry and tells `onEntry`; stale ones (an older revision than one already seen) are not news, unless the stream went back. */
  private record(entry: LeaseEntry, rewound = false): void {
    if (this.stopping.signal.aborted) return;
    if (!rewound && this.lastEntry !== undefined && entry.revision < this.lastEntry.revision) return;
    this.lastEntry = entry;
    try {
      this.o.onEntry?.(entry);
    } catch (err) {
      this.log.error("lease onEntry callback threw", { err: String(err) });
    }
  }

  /**
   * (Re)starts the watch and reads the key once (a watch says nothing about a key that never
   * existed). The read does not wait for the watch: a watch is a JetStream consumer, which
   * nats-server 2.9 may place on a server that was just lost, and then no watch starts for as
   * long as that lasts, while a get is answered by the stream leader. The core asks for this
   * when its view is known to be stale (its write was refused); an ex-leader whose last renewal
   * landed unacknowledged otherwise retried its takeover from that stale revision for ever.
   */
  private startWatch(): void {
    if (this.stopping.signal.aborted) return;
    const seq = ++this.watchSeq;
    this.cancelRewatch();
    this.cancelReread();
    this.watcher?.stop();
    this.watcher = undefined;
    this.read(seq);
    const retry = (why: string): void => {
      if (seq !== this.watchSeq || this.stopping.signal.aborted) return;
      this.log.debug("lease watch restarting", { why });
      this.cancelRewatch = this.clock.setTimer(this.rewatchMs, () => {
        this.startWatch();
      });
    };
    const run = async (): Promise<void> => {
      let starting: Promise<QueuedIterator<unknown>> | undefined;
      const it = await this.bounded("lease watch", () => (starting = this.o.kv.watch({ key: this.key, include: KvWatchInclude.LastValue }))).catch((err: unknown) => {
        // A watch that starts after its deadline is stopped, not left running unread.
        starting?.then((late) => { late.stop(); }, () => undefined);
        throw err;
      });
      if (seq !== this.watchSeq || this.stopping.signal.aborted) {
        it.stop();
        return;
      }
      this.watcher = it;
      for await (const e of it) {
        if (seq !== this.watchSeq) return;
        this.observe(e);
      }
      retry("watch ended");
    };
    run().catch((err: unknown) => {
      retry(String(err));
    });
  }

  /** Reads the key through the stream leader until one read answers (or a newer watch starts, or stop). */
  private read(seq: number): void {
    this.bounded("lease read", () => this.o.kv.get(this.key)).then(
      (e) => {
        // Even after a newer watch started: an older revision is no news to the core, a newer one is.
        this.observe(e);
      },
      (err: unknown) => {
        if (seq !== this.watchSeq || this.stopping.signal.aborted) return;
        this.log.debug("lease read failed; reading again", { err: String(err) });
        this.cancelReread = this.clock.setTimer(this.rewatchMs, () => {
          if (seq === this.watchSeq) this.read(seq);
        });
      },
    );
  }
}
