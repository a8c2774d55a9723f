import type { WatchdogCore } from "@warden/watchdog";
import type { HeldInstance } from "./loader-types.js";
import type { BackendHandle } from "./ports.js";
import type { ReplicaIndex } from "./replica-index.js";

/** One replica with an address, as the index last read it from the watchdog. */
interface Route {
  readonly incarnation: string;
  readonly address: string;
  /** Position among the model's replicas, oldest first (the last tie-break). */
  readonly seq: number;
  inFlight: number;
  lastUsedMs: number;
  /** Position in the heap. */
  at: number;
}

/** Routing order: fewest in flight, then least recently used, then oldest (chooseReplica's). */
function before(a: Route, b: Route): boolean {
  if (a.inFlight !== b.inFlight) return a.inFlight < b.inFlight;
  if (a.lastUsedMs !== b.lastUsedMs) return a.lastUsedMs < b.lastUsedMs;
  return a.seq < b.seq;
}

/** One model's replicas with an address, in a binary min-heap by routing order. */
class ModelRoutes {
  readonly byIncarnation = new Map<string, Route>();
  readonly heap: Route[] = [];
  /** Held replicas without an address when built (loading): one that gets an address makes the order stale. */
  readonly addressless: string[] = [];

  constructor(readonly version: number) {}

  /** After `r`'s key changed: restore the heap order around it. O(log replicas). */
  fix(r: Route): void {
    this.up(r.at);
    this.down(r.at);
  }

  heapify(): void {
    this.heap.forEach((r, i) => (r.at = i));
    for (let i = (this.heap.length >> 1) - 1; i >= 0; i--) this.down(i);
  }

  private up(i: number): void {
    const h = this.heap;
    while (i > 0) {
      const p = (i - 1) >> 1;
      const a = h[i];
      const b = h[p];
      if (a === undefined || b === undefined || !before(a, b)) return;
      this.swap(i, p);
      i = p;
    }
  }

  private down(i: number): void {
    const h = this.heap;
    for (;;) {
      let m = i;
      for (const c of [2 * i + 1, 2 * i + 2]) {
        const x = h[c];
        const y = h[m];
        if (x !== undefined && y !== undefined && before(x, y)) m = c;
      }
      if (m === i) return;
      this.swap(i, m);
      i = m;
    }
  }

  private swap(i: number, j: number): void {
    const h = this.heap;
    const a = h[i];
    const b = h[j];
    if (a === undefined || b === undefined) return;
    h[i] = b;
    h[j] = a;
    a.at = j;
    b.at = i;
  }
}

/** What the index needs of the loader's state. */
export interface RoutesSource<H extends BackendHandle> {
  readonly held: ReadonlyMap<string, HeldInstance<H>>;
  readonly replicas: ReplicaIndex;
  readonly core: Pick<WatchdogCore, "inFlight" | "lastUsedMs">;
}

/**
 * model → its replicas in routing order (fewest in flight, then least
 * recently used, then oldest: chooseReplica's), as a heap, so the per-call
 * choice looks at the head of the order instead of at every replica (issue
 * 16 bench: 100 replicas). A mirror, not a second owner: the watchdog owns
 * calls in flight and last use, the held table owns membership. The loader
 * tells the index after each write it makes (a call begun or ended, a use:
 * O(log replicas)); membership is checked by the replica index's version; and
 * every entry a pick looks at is compared with the watchdog first — any
 * difference rebuilds the model's order from the watchdog (O(replicas), rare).
 * Routability is not mirrored: the pick checks it per entry looked at, as the
 * full scan does, and walks past the ones that are not (best first).
 */
export class ReplicaRoutes<H extends BackendHandle> {
  private readonly byModel = new Map<string, ModelRoutes>();

  constructor(private readonly s: RoutesSource<H>) {}

  /**
   * The replica a call goes to among those `routable` accepts — the one the
   * full scan (chooseReplica) picks — or undefined when none is.
   */
  pick(model: string, routable: (h: HeldInstance<H>) => boolean): { readonly best: HeldInstance<H>; readonly inFlight: number } | undefined {
    // A looked-at entry that differs from the watchdog rebuilds the order once; a second difference answers undefined (the caller's full scan decides).
    for (let attempt = 0; attempt < 2; attempt++) {
      const found = this.walk(this.fresh(model), routable);
      if (found !== "stale") return found;
      this.byModel.delete(model);
    }
    return undefined;
  }

  /** After a write to `incarnation`'s calls or last use: re-read them from the watchdog and move it in the order. */
  touched(model: string, incarnation: string): void {
    const m = this.byModel.get(model);
    const r = m?.byIncarnation.get(incarnation);
    if (m === undefined || r === undefined) return;
    r.inFlight = this.s.core.inFlight(r.address);
    r.lastUsedMs = this.s.core.lastUsedMs(r.address) ?? -Infinity;
    m.fix(r);
  }

  /** Best first over the heap: the root, then the children of each entry passed over (not routable). */
  private walk(m: ModelRoutes, routable: (h: HeldInstance<H>) => boolean): { best: HeldInstance<H>; inFlight: number } | undefined | "stale" {
    const heap = m.heap;
    const frontier: Route[] = [];
    const root = heap[0];
    if (root !== undefined) frontier.push(root);
    while (frontier.length > 0) {
      // The frontier is small (one more entry per replica passed over): a linear minimum is enough.
      let k = 0;
      for (let i = 1; i < frontier.length; i++) if (before(frontier[i] as Route, frontier[k] as Route)) k = i;
      const r = frontier[k] as Route;
      frontier.splice(k, 1);
      const h = this.s.held.get(r.incarnation);
      if (h === undefined || h.address !== r.address) return "stale";
      if (this.s.core.inFlight(r.address) !== r.inFlight || (this.s.core.lastUsedMs(r.address) ?? -Infinity) !== r.lastUsedMs) return "stale";
      if (routable(h)) return { best: h, inFlight: r.inFlight };
      for (const c of [heap[2 * r.at + 1], heap[2 * r.at + 2]]) if (c !== undefined) frontier.push(c);
    }
    return undefined;
  }

  private fresh(model: string): ModelRoutes {
    const version = this.s.replicas.version(model);
    const m = this.byModel.get(model);
    if (m !== undefined && m.version === version && m.addressless.every((inc) => this.s.held.get(inc)?.address === undefined)) return m;
    return this.build(model, version);
  }

  private build(model: string, version: number): ModelRoutes {
    const m = new ModelRoutes(version);
    let seq = 0;
    for (const inc of this.s.replicas.of(model)) {
      const h = this.s.held.get(inc);
      if (h === undefined) continue;
      if (h.address === undefined) {
        m.addressless.push(inc);
        continue;
      }
      const r: Route = { incarnation: inc, address: h.address, seq: seq++, inFlight: this.s.core.inFlight(h.address), lastUsedMs: this.s.core.lastUsedMs(h.address) ?? -Infinity, at: 0 };
      m.byIncarnation.set(inc, r);
      m.heap.push(r);
    }
    m.heapify();
    this.byModel.set(model, m);
    return m;
  }
}
