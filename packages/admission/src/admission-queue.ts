import { isPlanted } from "@warden/common";
import { priorityClasses, type AdmissionLimits, type PriorityClass } from "./admission-types.js";

/** What a call asking to enter is told. */
export type EnterOutcome =
  | { readonly t: "admitted" }
  | { readonly t: "queued" }
  /** Refused at once (RESOURCE_EXHAUSTED / HTTP 429): `why` names the bound. */
  | { readonly t: "refused"; readonly why: string };

interface Principal<T> {
  readonly name: string;
  readonly waiting: T[];
  /** Where `waiting` starts (a FIFO without shifting the array). */
  head: number;
}

/** One class's backlog: principals with waiting calls, served round robin. */
interface ClassBacklog<T> {
  readonly byName: Map<string, Principal<T>>;
  /** Backlogged principals in service order; a principal is here once while it has calls waiting. */
  readonly ring: Principal<T>[];
  ringHead: number;
}

interface Waiting<T> {
  readonly cls: PriorityClass;
  readonly principal: Principal<T>;
}

/**
 * One model's admission: at most `capacity` calls in flight, the rest wait.
 * Waiting calls are served strictly by class (critical, then standard, then
 * sheddable) and, within a class, round robin between principals — fair
 * queueing with equal weights, since one call is one unit of a replica's
 * concurrency whatever its size. Pure: no clock, no timers; the caller owns
 * waking the tickets it is handed back.
 *
 * Bounds: a sheddable call is refused at once when `shedAtQueued` calls wait;
 * any call is refused when its principal already has `maxQueuedPerPrincipal`
 * waiting (one tenant cannot fill the queue); when `maxQueued` wait, a
 * critical or standard arrival pushes out the newest waiting call of the
 * lowest class below its own, else it is refused. Every operation is O(1)
 * amortised, except pushing out, which is O(waiting of that class) at worst.
 */
export class AdmissionQueue<T> {
  private inFlightCount = 0;
  private queuedCount = 0;
  private readonly classes = new Map<PriorityClass, ClassBacklog<T>>(priorityClasses.map((c) => [c, { byName: new Map(), ring: [], ringHead: 0 }]));
  private readonly where = new Map<T, Waiting<T>>();

  get inFlight(): number {
    return this.inFlightCount;
  }

  get queued(): number {
    return this.queuedCount;
  }

  /** Waiting calls of one class (metrics, tests). */
  queuedOf(cls: PriorityClass): number {
    let n = 0;
    for (const p of this.backlog(cls).byName.values()) n += p.waiting.length - p.head;
    return n;
  }

  /**
   * A call of `cls` from `principal` asks to enter. `ticket` must be unique
   * among this queue's waiting calls. A "queued" ticket comes back from
   * {@link leave} or {@link pump} when it may go, or is dropped by {@link cancel}.
   * `pushedOut` is a waiting call removed to make room: the caller refuses it.
   */
  enter(ticket: T, cls: PriorityClass, principal: string, limits: AdmissionLimits): EnterOutcome & { readonly pushedOut?: { readonly ticket: T; readonly why: string }; readonly pushedOutClass?: PriorityClass } {
    if (this.inFlightCount < limits.capacity && this.queuedCount === 0) {
      this.inFlightCount++;
      return { t: "admitted" };
    }
    if (cls === "sheddable" && this.queuedCount >= limits.shedAtQueued) {
      return { t: "refused", why: `${String(this.queuedCount)} calls wait (sheddable calls are refused from ${String(limits.shedAtQueued)})` };
    }
    const own = this.backlog(cls).byName.get(principal);
    if (own !== undefined && own.waiting.length - own.head >= limits.maxQueuedPerPrincipal) {
      return { t: "refused", why: `this caller already has ${String(limits.maxQueuedPerPrincipal)} calls waiting for this model` };
    }
    let pushedOut: { ticket: T; why: string } | undefined;
    let pushedOutClass: PriorityClass | undefined;
    if (this.queuedCount >= limits.maxQueued) {
      const victim = this.newestBelow(cls);
      if (victim === undefined) return { t: "refused", why: `${String(limits.maxQueued)} calls already wait for this model` };
      pushedOutClass = this.where.get(victim)?.cls;
      this.remove(victim);
      pushedOut = { ticket: victim, why: `pushed out of a full queue (${String(limits.maxQueued)} waiting) by a ${cls} call` };
    }
    this.push(ticket, cls, principal);
    return pushedOut === undefined ? { t: "queued" } : { t: "queued", pushedOut, pushedOutClass: pushedOutClass ?? "sheddable" };
  }

  /** A call that was admitted ended: frees its place and lets waiting calls in. */
  leave(limits: AdmissionLimits): T[] {
    if (this.inFlightCount > 0) this.inFlightCount--;
    return this.pump(limits);
  }

  /** Lets waiting calls in while there is capacity (call after the capacity grew). */
  pump(limits: AdmissionLimits): T[] {
    const out: T[] = [];
    while (this.inFlightCount < limits.capacity && this.queuedCount > 0) {
      const next = this.next();
      if (next === undefined) break;
      this.inFlightCount++;
      out.push(next);
    }
    return out;
  }

  /** A waiting call gave up (deadline, cancel): removed; false when it was not waiting. */
  cancel(ticket: T): boolean {
    if (!this.where.has(ticket)) return false;
    this.remove(ticket);
    return true;
  }

  private backlog(cls: PriorityClass): ClassBacklog<T> {
    const b = this.classes.get(cls);
    if (b === undefined) throw new Error(`unknown class ${cls}`);
    return b;
  }

  private push(ticket: T, cls: PriorityClass, name: string): void {
    const b = this.backlog(cls);
    let p = b.byName.get(name);
    if (p === undefined) {
      p = { name, waiting: [], head: 0 };
      b.byName.set(name, p);
      b.ring.push(p);
    }
    p.waiting.push(ticket);
    this.where.set(ticket, { cls, principal: p });
    this.queuedCount++;
  }

  /** The next ticket to admit: the highest class with calls waiting, its principals in turn. */
  private next(): T | undefined {
    // Planted: the lowest class is served first.
    const order = isPlanted("admission-lowest-class-first") ? [...priorityClasses].reverse() : priorityClasses;
    for (const cls of order) {
      const b = this.backlog(cls);
      while (b.ringHead < b.ring.length) {
        const p = b.ring[b.ringHead];
        b.ringHead++;
        if (p === undefined) continue;
        const ticket = p.waiting[p.head];
        if (ticket === undefined) continue; // emptied by cancels: it left the ring
        p.head++;
        this.where.delete(ticket);
        this.queuedCount--;
        if (p.head < p.waiting.length) {
          // Planted: the principal keeps its slot at the ring's head instead of going to the back.
          if (isPlanted("admission-principal-keeps-turn")) b.ringHead--;
          else b.ring.push(p);
        } else this.drop(b, p);
        this.compact(b);
        return ticket;
      }
      this.compact(b);
    }
    return undefined;
  }

  /** The newest waiting call of the lowest class below `cls`, if any. */
  private newestBelow(cls: PriorityClass): T | undefined {
    const rank = priorityClasses.indexOf(cls);
    for (let i = priorityClasses.length - 1; i > rank; i--) {
      const lower = priorityClasses[i];
      if (lower === undefined) continue;
      const b = this.backlog(lower);
      // The principal with the most waiting gives one up: its newest.
      let most: Principal<T> | undefined;
      for (const p of b.byName.values()) if (most === undefined || p.waiting.length - p.head > most.waiting.length - most.head) most = p;
      if (most !== undefined && most.waiting.length > most.head) return most.waiting[most.waiting.length - 1];
    }
    return undefined;
  }

  private remove(ticket: T): void {
    const w = this.where.get(ticket);
    if (w === undefined) return;
    this.where.delete(ticket);
    this.queuedCount--;
    const p = w.principal;
    const i = p.waiting.indexOf(ticket, p.head);
    if (i >= 0) p.waiting.splice(i, 1);
    if (p.head >= p.waiting.length) this.drop(this.backlog(w.cls), p);
  }

  /** A principal with nothing waiting leaves its class (its ring slot is skipped when reached). */
  private drop(b: ClassBacklog<T>, p: Principal<T>): void {
    p.waiting.length = 0;
    p.head = 0;
    if (b.byName.get(p.name) === p) b.byName.delete(p.name);
  }

  /** Keeps the ring's consumed prefix from growing without bound. */
  private compact(b: ClassBacklog<T>): void {
    if (b.ringHead > 64 && b.ringHead * 2 > b.ring.length) {
      b.ring.splice(0, b.ringHead);
      b.ringHead = 0;
    }
  }
}
