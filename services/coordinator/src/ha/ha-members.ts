import { KvWatchInclude, type KV, type KvEntry } from "@nats-io/kv";
import type { QueuedIterator } from "@nats-io/transport-node";
import { deadlineSignal, raceSignal, type Cancel, type Clock, type Logger } from "@warden/common";

export type HaRole = "leader" | "standby" | "paused";

/** One member as last announced; `seenAtMs` on this process's monotonic clock. */
export interface HaMemberSeen {
  readonly holder: string;
  readonly address: string;
  readonly role: HaRole;
  /** Base URL of its HTTP listener (OpenAI API, dashboard); undefined when it has none. */
  readonly httpUrl: string | undefined;
  readonly seenAtMs: number;
}

/** Members shown: announced within this long. */
export const memberFreshMs = 30_000;
/** Members kept and shown, at most (the newest). */
export const maxMembers = 64;
/** A member key older than this (by its writer's wall clock) is deleted by the leader: a dead incarnation's. */
const staleMemberMs = 10 * 60_000;
const memberPrefix = "member.";

interface MemberValue {
  readonly address: string;
  readonly role: HaRole;
  readonly wallMs: number;
  readonly httpUrl?: string;
}

/** An announced HTTP base URL: http(s)://host:port, nothing else (a standby redirects browsers to it). */
export function plausibleHttpUrl(v: unknown): string | undefined {
  if (typeof v !== "string" || v.length > 300) return undefined;
  return /^https?:\/\/[^\s/?#@]+:\d{1,5}$/.test(v) ? v : undefined;
}

function parse(e: KvEntry): MemberValue | undefined {
  if (e.operation !== "PUT") return undefined;
  try {
    const v = e.json<Partial<MemberValue>>();
    if (typeof v.address !== "string" || v.address.length > 300 || typeof v.wallMs !== "number") return undefined;
    const role: HaRole = v.role === "leader" || v.role === "paused" ? v.role : "standby";
    const httpUrl = plausibleHttpUrl(v.httpUrl);
    return { address: v.address, role, wallMs: v.wallMs, ...(httpUrl === undefined ? {} : { httpUrl }) };
  } catch {
    return undefined;
  }
}

/**
 * Membership in the lease bucket: each member writes
 * `member.<holder>` = {address, role, wallMs, httpUrl?} every `intervalMs` and watches
 * every other member's key. Ages use the writer's wall clock only for a key
 * first seen in the watch's initial replay (a dead member's old key); after
 * that, the time this process received it. Every KV call has a deadline.
 */
export class HaMembers {
  private readonly seen = new Map<string, HaMemberSeen>();
  private cancelTimer: Cancel = () => {};
  private cancelRewatch: Cancel = () => {};
  private watcher: QueuedIterator<KvEntry> | undefined;
  private stopped = false;
  /** Whether the last announcement was acknowledged (a member's view of quorum when it does not lead). */
  private lastWriteOk = false;

  constructor(
    private readonly o: {
      readonly kv: KV;
      readonly holder: string;
      readonly address: string;
      readonly role: () => HaRole;
      /** This member's HTTP base URL, once its listener is bound (undefined: none). */
      readonly httpUrl?: () => string | undefined;
      readonly isLeader: () => boolean;
      readonly intervalMs: number;
      readonly opTimeoutMs: number;
      readonly clock: Clock;
      readonly log: Logger;
    },
  ) {}

  start(): void {
    this.announce();
    this.watch();
  }

  writesOk(): boolean {
    return this.lastWriteOk;
  }

  /** Other members announced within {@link memberFreshMs}, newest first, at most {@link maxMembers}. */
  others(): HaMemberSeen[] {
    const now = this.o.clock.now();
    return [...this.seen.values()].filter((m) => m.holder !== this.o.holder && now - m.seenAtMs <= memberFreshMs).sort((a, b) => b.seenAtMs - a.seenAtMs).slice(0, maxMembers);
  }

  /** Announces at once (a role change should show without waiting a whole interval). */
  announce(): void {
    if (this.stopped) return;
    this.cancelTimer();
    const httpUrl = this.o.httpUrl?.();
    const value = JSON.stringify({ address: this.o.address, role: this.o.role(), wallMs: this.o.clock.wallNow(), ...(httpUrl === undefined ? {} : { httpUrl }) } satisfies MemberValue);
    const d = deadlineSignal(this.o.clock, this.o.opTimeoutMs, "ha member announce");
    raceSignal(this.o.kv.put(memberPrefix + this.o.holder, value), d.signal)
      .then(
        () => {
          this.lastWriteOk = true;
        },
        (err: unknown) => {
          this.lastWriteOk = false;
          this.o.log.debug("member announce failed", { err: String(err) });
        },
      )
      .finally(() => {
        d.cleanup();
      });
    this.cancelTimer = this.o.clock.setTimer(this.o.intervalMs, () => {
      this.announce();
    });
  }

  private record(e: KvEntry, initial: boolean): void {
    const holder = e.key.slice(memberPrefix.length);
    const v = parse(e);
    if (v === undefined) {
      this.seen.delete(holder);
      return;
    }
    const ageMs = initial ? Math.max(0, this.o.clock.wallNow() - v.wallMs) : 0;
    if (initial && ageMs > staleMemberMs && this.o.isLeader()) {
      // A dead incarnation's key: nobody else removes it (kill -9 leaves it).
      void this.o.kv.delete(e.key).catch(() => undefined);
      return;
    }
    this.seen.set(holder, { holder, address: v.address, role: v.role, httpUrl: v.httpUrl, seenAtMs: this.o.clock.now() - ageMs });
    if (this.seen.size > maxMembers * 2) {
      const oldest = [...this.seen.values()].sort((a, b) => a.seenAtMs - b.seenAtMs)[0];
      if (oldest !== undefined) this.seen.delete(oldest.holder);
    }
  }

  private watch(): void {
    if (this.stopped) return;
    const retry = (): void => {
      if (this.stopped) return;
      this.watcher = undefined;
      this.cancelRewatch = this.o.clock.setTimer(this.o.intervalMs, () => {
        this.watch();
      });
    };
    const run = async (): Promise<void> => {
      const it = await this.o.kv.watch({ key: `${memberPrefix}>`, include: KvWatchInclude.LastValue });
      if (this.stopped) {
        it.stop();
        return;
      }
      this.watcher = it;
      for await (const e of it) this.record(e, !e.isUpdate);
      retry();
    };
    run().catch((err: unknown) => {
      this.o.log.debug("member watch restarting", { err: String(err) });
      retry();
    });
  }

  /** Stops announcing and watching; removes this member's key (best effort, bounded). */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.cancelTimer();
    this.cancelRewatch();
    this.watcher?.stop();
    const d = deadlineSignal(this.o.clock, this.o.opTimeoutMs, "ha member leave");
    await raceSignal(this.o.kv.delete(memberPrefix + this.o.holder), d.signal).catch(() => undefined);
    d.cleanup();
  }
}
