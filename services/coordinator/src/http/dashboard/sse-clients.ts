import type { ServerResponse } from "node:http";

/** Bounds of the dashboard's server-sent event streams. */
export interface SseLimits {
  /** Open streams at once; one more is refused with 503 (a page retries after a while). */
  readonly maxClients: number;
  /**
   * Bytes a stream may have waiting in its socket's user-space buffer. A client
   * that reads slower than events come is disconnected past this, never
   * buffered without bound; its page reconnects and gets a fresh snapshot.
   */
  readonly maxPendingBytes: number;
  /**
   * Open streams one caller (a token; with auth off, a client address) may
   * hold, so one cannot take every slot (as WatchEvents' per-caller cap).
   * undefined = only maxClients.
   */
  readonly maxClientsPerCaller?: number;
}

export const defaultSseLimits: SseLimits = Object.freeze({ maxClients: 32, maxPendingBytes: 1024 * 1024, maxClientsPerCaller: 16 });

/** One SSE frame. `data` must be a single line (JSON is). */
export function sseFrame(event: string, data: string): string {
  return `event: ${event}\ndata: ${data}\n\n`;
}

/** A comment frame: keeps proxies from timing the stream out, carries nothing. */
export const sseKeepAlive = ": keep-alive\n\n";

export type SseAdmission = { readonly t: "admitted"; readonly id: number } | { readonly t: "full"; readonly open: number } | { readonly t: "caller-full"; readonly open: number };

/**
 * The open event streams: admission against `maxClients`, one write per
 * frame per client, and the slow-client rule. Each frame is formatted once by
 * the caller and written to every stream, so cost per event is the number of
 * clients, not their history. Owns its set; a stream leaves it when its
 * response closes, whoever closed it.
 */
export class SseClients {
  private readonly open = new Map<number, ServerResponse>();
  private nextId = 1;
  private closed = false;
  /** Streams ended because they fell behind (for logs and tests). */
  dropped = 0;

  constructor(
    readonly limits: SseLimits = defaultSseLimits,
    private readonly onDrop: (id: number, pendingBytes: number) => void = () => {},
  ) {}

  get size(): number {
    return this.open.size;
  }

  /**
   * Takes `res` as a stream (writes the SSE headers) or refuses it when full
   * (the caller answers 503). `first` is written before any broadcast can be,
   * so a client's snapshot always precedes the events after it.
   */
  admit(res: ServerResponse, first: string): SseAdmission {
    if (this.closed || this.open.size >= this.limits.maxClients) return { t: "full", open: this.open.size };
    const id = this.nextId++;
    res.writeHead(200, {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-store",
      connection: "keep-alive",
      "x-accel-buffering": "no",
    });
    this.open.set(id, res);
    res.once("close", () => {
      this.open.delete(id);
    });
    this.write(id, res, first);
    return { t: "admitted", id };
  }

  /** Writes `frame` to every open stream; a stream past its pending bound is ended instead. */
  broadcast(frame: string): void {
    for (const [id, res] of this.open) this.write(id, res, frame);
  }

  private write(id: number, res: ServerResponse, frame: string): void {
    // Ended elsewhere (a revoked token's stream: route-roles.ts) before its close event removed it.
    if (res.writableEnded || res.destroyed) {
      this.open.delete(id);
      return;
    }
    const pending = res.writableLength;
    if (pending + Buffer.byteLength(frame, "utf8") > this.limits.maxPendingBytes) {
      this.open.delete(id);
      this.dropped++;
      this.onDrop(id, pending);
      // destroy, not end: end would queue behind the very bytes the client is not reading.
      res.destroy();
      return;
    }
    res.write(frame);
  }

  /** Ends every open stream (their pages reconnect and start from a snapshot). */
  endAll(): void {
    for (const res of this.open.values()) res.end();
    this.open.clear();
  }

  /** Ends every stream and refuses new ones (coordinator shutdown). */
  close(): void {
    this.closed = true;
    this.endAll();
  }
}
