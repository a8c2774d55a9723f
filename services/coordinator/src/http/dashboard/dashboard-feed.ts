import type { ServerResponse } from "node:http";
import type { Event } from "@warden/proto";
import { eventToJson } from "@warden/events";
import type { Cancel, Clock, Logger } from "@warden/common";
import type { DashboardSnapshot } from "./dashboard-view.js";
import type { CallListener } from "./call-activity.js";
import { SseClients, sseFrame, sseKeepAlive, type SseAdmission, type SseLimits } from "./sse-clients.js";

/** The part of the EventHub the feed reads (in-process watch, no per-caller cap). */
export interface EventSource {
  watch(filter: Record<string, never>, signal: AbortSignal): AsyncIterable<Event>;
}

export interface FeedOptions {
  readonly hub: EventSource;
  readonly snapshot: () => Promise<DashboardSnapshot>;
  readonly clock: Clock;
  readonly log: Logger;
  readonly limits: SseLimits;
  /**
   * A fresh snapshot this long after an event (events that come meanwhile share it):
   * an event says what happened, the snapshot shows the state it left.
   */
  readonly settleMs?: number;
  /** And at least this often while anyone watches: in-flight and last-used change without events. */
  readonly refreshMs?: number;
  /** Routed calls as they begin and end: each instance's in-flight count is pushed (a `busy` frame). */
  readonly calls?: { listen(l: CallListener): () => void };
  /** Changes within this window share one `busy` frame (the page shows a change within it, plus the network). */
  readonly busyFlushMs?: number;
}

/** One instance's in-flight count as of a `busy` frame. */
export interface BusyChange {
  readonly incarnation: string;
  readonly model: string;
  readonly nodeId: string;
  readonly inFlight: number;
}

/** Frames an event may collect for a stream whose first snapshot is still being taken. */
const maxJoiningFrames = 1_000;

/** How long a snapshot taken ahead (prepare) waits for the stream it was taken for; then it is dropped. */
export const preparedForMs = 3_000;

/** A snapshot taken ahead of its stream, with the frames since it began (held like a joining stream's). */
interface Prepared {
  readonly held: string[];
  readonly snap: Promise<DashboardSnapshot>;
  readonly expire: Cancel;
}

/**
 * The dashboard's live feed: one EventHub watch and one snapshot per refresh,
 * whatever the number of pages, broadcast to every SSE stream. A stream gets
 * a snapshot first, then every event and snapshot after it in order; the
 * events that arrive while its snapshot is taken are held for it, so none
 * falls between its snapshot and its stream.
 */
export class DashboardFeed {
  readonly clients: SseClients;
  private watch: AbortController | undefined;
  private readonly joining = new Set<string[]>();
  /** Streams open or joining per caller (only callers with at least one). */
  private readonly perCaller = new Map<string, number>();
  private refreshTimer: Cancel | undefined;
  private settleTimer: Cancel | undefined;
  private refreshing = false;
  /**
   * In-flight counts changed since the last `busy` frame, by incarnation:
   * bounded by the instances that took calls in one flush window (each
   * entry replaced, not added, by its next change).
   */
  private busy = new Map<string, BusyChange>();
  private busyTimer: Cancel | undefined;
  private unlistenCalls: (() => void) | undefined;
  private closed = false;
  /** At most one snapshot taken ahead (prepare): one per preparedForMs however many pages are asked for. */
  private prepared: Prepared | undefined;

  constructor(private readonly o: FeedOptions) {
    this.clients = new SseClients(o.limits, (id, pending) => {
      o.log.warn("dashboard event stream dropped: the client fell behind", { stream: id, pendingBytes: pending, maxPendingBytes: o.limits.maxPendingBytes });
    });
  }

  /**
   * Opens a stream on `res` for `caller` (see SseLimits.maxClientsPerCaller);
   * the route answers 503 when this says full, 429 when caller-full.
   */
  async connect(res: ServerResponse, caller?: string): Promise<SseAdmission> {
    if (this.closed || this.clients.size + this.joining.size >= this.o.limits.maxClients) return { t: "full", open: this.clients.size };
    const cap = this.o.limits.maxClientsPerCaller;
    if (caller !== undefined && cap !== undefined) {
      const mine = this.perCaller.get(caller) ?? 0;
      if (mine >= cap) return { t: "caller-full", open: mine };
      // Counted from here until the response closes, however it ends (refused below, dropped, revoked, gone).
      this.perCaller.set(caller, mine + 1);
      res.once("close", () => {
        const left = (this.perCaller.get(caller) ?? 1) - 1;
        if (left > 0) this.perCaller.set(caller, left);
        else this.perCaller.delete(caller);
      });
    }
    const p = this.prepared;
    this.prepared = undefined;
    p?.expire();
    const held = p?.held ?? [];
    this.joining.add(held);
    this.ensureWatching();
    let snap: DashboardSnapshot;
    try {
      snap = await (p?.snap ?? this.o.snapshot());
    } finally {
      this.joining.delete(held);
    }
    if (held.length > maxJoiningFrames) return { t: "full", open: this.clients.size };
    const admitted = this.clients.admit(res, sseFrame("snapshot", JSON.stringify(snap)) + held.join(""));
    if (admitted.t === "admitted") res.once("close", () => { this.maybeStop(); });
    else this.maybeStop();
    return admitted;
  }

  /**
   * Starts the next stream's first snapshot now (the page was asked for: its
   * stream follows once its script has loaded), so the first paint does not
   * wait for it. The hub watch starts first and the events from then on are
   * held for that stream, as for a joining one, so none falls between the
   * snapshot and the stream. One at a time; unused after preparedForMs, it
   * is dropped.
   */
  prepare(): void {
    if (this.closed || this.prepared !== undefined || this.clients.size + this.joining.size >= this.o.limits.maxClients) return;
    const held: string[] = [];
    this.joining.add(held);
    this.ensureWatching();
    const snap = this.o.snapshot();
    // Its failure is the stream's to report (connect awaits it); unused, it is dropped silently.
    snap.catch(() => undefined);
    const p: Prepared = {
      held,
      snap,
      expire: this.o.clock.setTimer(preparedForMs, () => {
        if (this.prepared !== p) return;
        this.prepared = undefined;
        this.joining.delete(held);
        this.maybeStop();
      }),
    };
    this.prepared = p;
  }

  private ensureWatching(): void {
    if (this.watch !== undefined || this.closed) return;
    const ctl = new AbortController();
    this.watch = ctl;
    void (async () => {
      try {
        for await (const e of this.o.hub.watch({}, ctl.signal)) this.onEvent(e);
      } catch (err) {
        // The hub closed (shutdown) or this watch fell behind: streams end, pages reconnect.
        if (!ctl.signal.aborted) {
          this.o.log.info("dashboard feed ended", { reason: err instanceof Error ? err.message : String(err) });
          this.clients.endAll();
        }
      } finally {
        if (this.watch === ctl) this.watch = undefined;
      }
    })();
    this.refreshTimer = this.o.clock.setTimer(this.o.refreshMs ?? 2_000, () => { this.tick(); });
    this.unlistenCalls?.();
    this.unlistenCalls = this.o.calls?.listen((c) => {
      this.busy.set(c.incarnation, { incarnation: c.incarnation, model: c.model, nodeId: c.nodeId, inFlight: c.inFlight });
      this.busyTimer ??= this.o.clock.setTimer(this.o.busyFlushMs ?? 50, () => {
        this.busyTimer = undefined;
        this.flushBusy();
      });
    });
  }

  /** The in-flight counts changed since the last flush, as one frame to every stream (and to those joining). */
  private flushBusy(): void {
    if (this.busy.size === 0) return;
    const frame = sseFrame("busy", JSON.stringify({ at: new Date(this.o.clock.wallNow()).toISOString(), instances: [...this.busy.values()] }));
    this.busy = new Map();
    for (const h of this.joining) if (h.length <= maxJoiningFrames) h.push(frame);
    this.clients.broadcast(frame);
  }

  private tick(): void {
    this.refresh();
    if (this.clients.size > 0) this.clients.broadcast(sseKeepAlive);
    if (this.watch !== undefined) this.refreshTimer = this.o.clock.setTimer(this.o.refreshMs ?? 2_000, () => { this.tick(); });
  }

  private onEvent(e: Event): void {
    const frame = sseFrame("event", JSON.stringify(eventToJson(e)));
    for (const h of this.joining) if (h.length <= maxJoiningFrames) h.push(frame);
    this.clients.broadcast(frame);
    if (this.settleTimer === undefined) {
      this.settleTimer = this.o.clock.setTimer(this.o.settleMs ?? 100, () => {
        this.settleTimer = undefined;
        this.refresh();
      });
    }
  }

  /** One snapshot for every stream; skipped while one is being taken (the next refresh catches up). */
  private refresh(): void {
    if (this.refreshing || this.clients.size === 0) return;
    this.refreshing = true;
    this.o
      .snapshot()
      .then((s) => {
        this.clients.broadcast(sseFrame("snapshot", JSON.stringify(s)));
      })
      .catch((err: unknown) => {
        this.o.log.warn("dashboard snapshot failed", { err: err instanceof Error ? err.message : String(err) });
      })
      .finally(() => {
        this.refreshing = false;
      });
  }

  /** No stream left: the hub watch and the timers go too (a page that comes back starts them again). */
  private maybeStop(): void {
    if (this.clients.size > 0 || this.joining.size > 0) return;
    this.watch?.abort();
    this.watch = undefined;
    this.refreshTimer?.();
    this.refreshTimer = undefined;
    this.settleTimer?.();
    this.settleTimer = undefined;
    this.unlistenCalls?.();
    this.unlistenCalls = undefined;
    this.busyTimer?.();
    this.busyTimer = undefined;
    this.busy.clear();
  }

  close(): void {
    this.closed = true;
    this.prepared?.expire();
    if (this.prepared !== undefined) this.joining.delete(this.prepared.held);
    this.prepared = undefined;
    this.clients.close();
    this.maybeStop();
  }
}
