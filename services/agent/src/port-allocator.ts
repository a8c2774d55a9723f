import { createServer } from "node:net";
import type { Clock } from "@warden/common";

/** Checks that nobody listens on host:port by binding it for a moment. */
export function probePortFree(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once("error", () => {
      resolve(false);
    });
    srv.listen({ host, port, exclusive: true }, () => {
      srv.close(() => {
        resolve(true);
      });
    });
  });
}

export interface PortAllocatorOptions {
  host: string;
  min: number;
  max: number;
  /** How long a released port stays unused. */
  quarantineMs: number;
  clock: Clock;
  /**
   * Where in the range the first search starts. @default min. The agent starts
   * at a random port: two agents on one machine (two `warden up`, a test run
   * beside `npm start`) would otherwise both probe `min` free at the same
   * moment and start two backends on it, one of which exits unable to bind.
   */
  startAt?: number;
  /** @default probePortFree */
  probe?: (host: string, port: number) => Promise<boolean>;
  /**
   * Ports a process the agent does not own was last seen listening on (the
   * port scan's foreign processes and orphans), skipped even when the probe
   * would pass: a listener on another address of the same port (127.0.0.2,
   * ::1) does not fail a bind on `host`, yet it is not ours to share a port with.
   */
  blocked?: (port: number) => boolean;
}

/**
 * Hands out backend ports from a range. A port is reserved synchronously before
 * it is probed, so two concurrent starts never get the same one. A released port
 * is quarantined: a late call aimed at the old backend must not reach a new one
 * (the incarnation and ModelIdentity checks are the real guard; this narrows the
 * window further).
 */
export class PortAllocator {
  private readonly inUse = new Set<number>();
  private readonly quarantinedUntil = new Map<number, number>();
  private cursor: number;

  constructor(private readonly options: PortAllocatorOptions) {
    const start = options.startAt ?? options.min;
    this.cursor = Number.isInteger(start) && start >= options.min && start <= options.max ? start : options.min;
  }

  /** Marks a port as taken (adopted backends). */
  claim(port: number): void {
    this.inUse.add(port);
    this.quarantinedUntil.delete(port);
  }

  /** Returns a port to the pool through quarantine. */
  release(port: number): void {
    if (!this.inUse.delete(port)) return;
    if (this.options.quarantineMs > 0) this.quarantinedUntil.set(port, this.options.clock.now() + this.options.quarantineMs);
  }

  /** A free port, or undefined when every port in the range is taken, quarantined, blocked or bound by someone else. */
  async allocate(signal?: AbortSignal): Promise<number | undefined> {
    const { min, max, host } = this.options;
    const size = max - min + 1;
    const now = this.options.clock.now();
    for (let i = 0; i < size; i++) {
      if (signal?.aborted === true) return undefined;
      const port = min + ((this.cursor - min + i) % size);
      if (this.inUse.has(port) || this.options.blocked?.(port) === true) continue;
      const until = this.quarantinedUntil.get(port);
      if (until !== undefined) {
        if (until > now) continue;
        this.quarantinedUntil.delete(port);
      }
      this.inUse.add(port);
      if (await (this.options.probe ?? probePortFree)(host, port)) {
        this.cursor = port + 1 > max ? min : port + 1;
        return port;
      }
      this.inUse.delete(port);
    }
    return undefined;
  }

  isInUse(port: number): boolean {
    return this.inUse.has(port);
  }
}
