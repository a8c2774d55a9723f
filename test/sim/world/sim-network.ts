import type { EventQueue } from "../kernel/event-queue.js";
import type { SimRandom } from "../kernel/sim-random.js";
import type { VirtualClock } from "../kernel/virtual-clock.js";
import type { Coverage } from "../check/coverage.js";

/** One direction of a coordinator↔agent link. */
interface Direction {
  /** Cut (partition) until this time. */
  downUntilMs: number;
}

/** Seeded link quality (swarm options). */
export interface LinkOptions {
  readonly baseDelayMs: number;
  readonly jitterMs: number;
  readonly lossP: number;
  readonly dupP: number;
  /** Probability a message gets an extra delay that lets later ones overtake it. */
  readonly reorderP: number;
}

export type Direction2 = "toAgent" | "toCoordinator";

/**
 * The network between the coordinator and each agent: per-direction
 * partitions, delay with jitter, loss, duplication and reordering. A message
 * is a closure delivered on the event queue; the receiver decides what it
 * means (an agent that crashed drops it, a paused one buffers it).
 */
export class SimNetwork {
  private readonly links = new Map<string, Record<Direction2, Direction>>();

  constructor(
    private readonly queue: EventQueue,
    private readonly clock: VirtualClock,
    private readonly rng: SimRandom,
    private readonly opts: LinkOptions,
    private readonly coverage: Coverage,
  ) {}

  private link(nodeId: string): Record<Direction2, Direction> {
    let l = this.links.get(nodeId);
    if (l === undefined) {
      l = { toAgent: { downUntilMs: 0 }, toCoordinator: { downUntilMs: 0 } };
      this.links.set(nodeId, l);
    }
    return l;
  }

  isUp(nodeId: string, dir: Direction2): boolean {
    return this.link(nodeId)[dir].downUntilMs <= this.clock.now();
  }

  /** Cuts one direction (asymmetric) or both until `untilMs`. */
  partition(nodeId: string, dirs: readonly Direction2[], untilMs: number): void {
    const l = this.link(nodeId);
    for (const d of dirs) l[d].downUntilMs = Math.max(l[d].downUntilMs, untilMs);
  }

  healAll(): void {
    for (const l of this.links.values()) {
      l.toAgent.downUntilMs = 0;
      l.toCoordinator.downUntilMs = 0;
    }
  }

  /** Sends a message; `lossless` for the in-process embedded agent. */
  send(nodeId: string, dir: Direction2, label: string, deliver: () => void, lossless = false): void {
    if (lossless) {
      this.queue.push(this.clock.now(), label, deliver);
      return;
    }
    if (!this.isUp(nodeId, dir)) {
      this.coverage.hit("net.partition-drop");
      return;
    }
    if (this.rng.chance(this.opts.lossP)) {
      this.coverage.hit("net.loss");
      return;
    }
    const copies = this.rng.chance(this.opts.dupP) ? 2 : 1;
    if (copies === 2) this.coverage.hit("net.duplicate");
    for (let i = 0; i < copies; i++) {
      let d = this.opts.baseDelayMs + this.rng.next() * this.opts.jitterMs;
      if (this.rng.chance(this.opts.reorderP)) {
        d += this.rng.next() * 3_000;
        this.coverage.hit("net.reorder");
      }
      this.queue.push(this.clock.now() + d, label, () => {
        // A partition cut while the message was in flight drops it too.
        if (this.isUp(nodeId, dir)) deliver();
      });
    }
  }
}
