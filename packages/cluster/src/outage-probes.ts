/**
 * Serving through an agent outage: the coordinator's own health probes of
 * the ready instances on nodes whose agent stopped heartbeating. A kubelet's
 * death does not stop its pods: an agent that is down, stopped or cut off
 * says nothing about the backends it started, which the coordinator reaches
 * over their own connections. While the node is unreachable each such
 * instance is probed (the backend's Health RPC) and stays routable as long
 * as its probes answer.
 *
 * Pure: no timers, no I/O. The owner calls {@link OutageProbes.takeDue} on
 * its interval (with a bound: the probes it may start now), sends the probes
 * it returns, and reports each answer through {@link OutageProbes.probed}.
 * Work is proportional to the instances on unreachable nodes: nothing here
 * looks at any other instance, and `takeDue` costs O(probes it returns) — a
 * queue in due order, not a scan — however many wait beyond the bound.
 */

/**
 * One probed instance's word. `serving`: routable — from the moment its node
 * turns unreachable (the instance was routed until then, and the silence is
 * the agent's, not the backend's: demanding a fresh answer first would refuse
 * calls for a probe's round trip with nothing learned) until a probe fails.
 * `failed`: never routed until a later probe answers or the agent is back.
 */
export type OutageProbeState = { readonly t: "serving"; readonly sinceMs: number; readonly answered: boolean } | { readonly t: "failed"; readonly sinceMs: number; readonly reason: string };

/** A probe to send: `generation` goes back with its answer, so an answer from before the node came back and left again is ignored. */
export interface DueProbe {
  readonly incarnation: string;
  readonly nodeId: string;
  readonly generation: number;
}

/** A probe's answer changed an instance's word (for the owner's log and events). */
export type ProbeChange = { readonly t: "failed"; readonly incarnation: string; readonly nodeId: string; readonly reason: string } | { readonly t: "recovered"; readonly incarnation: string; readonly nodeId: string };

interface Entry {
  readonly nodeId: string;
  readonly generation: number;
  state: OutageProbeState;
  dueAtMs: number;
  inFlight: boolean;
}

export interface OutageProbesOptions {
  /** Time between two probes of one instance (from the previous answer). @default 1000 */
  readonly intervalMs?: number;
}

/** A slot in a due queue; stale once its entry is gone, re-armed or taken (checked when it reaches the head). */
interface Slot {
  readonly incarnation: string;
  readonly generation: number;
  readonly dueAtMs: number;
}

/** A FIFO of slots appended in due order; `head` is the first not yet looked at, compacted once half is spent. */
class SlotQueue {
  private slots: Slot[] = [];
  private head = 0;

  push(slot: Slot): void {
    this.slots.push(slot);
  }

  /** The first slot if it is due at `nowMs`, removed. */
  shiftDue(nowMs: number): Slot | undefined {
    const slot = this.slots[this.head];
    if (slot === undefined || slot.dueAtMs > nowMs) return undefined;
    this.head++;
    if (this.head === this.slots.length) {
      this.slots = [];
      this.head = 0;
    } else if (this.head > 1024 && this.head * 2 > this.slots.length) {
      this.slots = this.slots.slice(this.head);
      this.head = 0;
    }
    return slot;
  }
}

export class OutageProbes {
  private readonly entries = new Map<string, Entry>();
  private readonly byNode = new Map<string, Set<string>>();
  private generation = 0;
  /**
   * Every armed probe, in two queues that appending keeps in due order (the
   * clock is monotonic and the interval one): first probes, due when their
   * node turned unreachable, and later ones, due an interval after an answer.
   */
  private readonly first = new SlotQueue();
  private readonly again = new SlotQueue();
  readonly intervalMs: number;

  constructor(o: OutageProbesOptions = {}) {
    this.intervalMs = o.intervalMs ?? 1000;
  }

  /**
   * The node's agent went silent: its ready instances (the caller's list)
   * are probed from now on, the first probe due at once. An instance already
   * tracked keeps its word.
   */
  nodeUnreachable(nodeId: string, incarnations: Iterable<string>, nowMs: number): void {
    let set = this.byNode.get(nodeId);
    for (const inc of incarnations) {
      if (this.entries.has(inc)) continue;
      const generation = ++this.generation;
      this.entries.set(inc, { nodeId, generation, state: { t: "serving", sinceMs: nowMs, answered: false }, dueAtMs: nowMs, inFlight: false });
      this.first.push({ incarnation: inc, generation, dueAtMs: nowMs });
      if (set === undefined) this.byNode.set(nodeId, (set = new Set()));
      set.add(inc);
    }
  }

  /**
   * The node heartbeats again (its agent's inventory speaks for the instances
   * from now on) or is lost (the lost-node rules take its instances): its
   * probes end. Returns the incarnations that were tracked.
   */
  nodeSettled(nodeId: string): string[] {
    const set = this.byNode.get(nodeId);
    if (set === undefined) return [];
    this.byNode.delete(nodeId);
    for (const inc of set) this.entries.delete(inc);
    return [...set];
  }

  /** The instance is no longer held (stopped, removed, forgotten): no more probes. */
  forget(incarnation: string): void {
    const e = this.entries.get(incarnation);
    if (e === undefined) return;
    this.entries.delete(incarnation);
    const set = this.byNode.get(e.nodeId);
    set?.delete(incarnation);
    if (set?.size === 0) this.byNode.delete(e.nodeId);
  }

  /**
   * The probes due at `nowMs`, at most `max` of them, marked in flight (at
   * most one per instance): first probes of newly unreachable nodes (their
   * instances have no answer yet), then the others, earliest first. O(probes
   * returned + stale slots passed); those left due are returned by a later call.
   */
  takeDue(nowMs: number, max = Number.POSITIVE_INFINITY): DueProbe[] {
    const due: DueProbe[] = [];
    for (const q of [this.first, this.again]) {
      while (due.length < max) {
        const slot = q.shiftDue(nowMs);
        if (slot === undefined) break;
        const e = this.entries.get(slot.incarnation);
        // Forgotten, settled and tracked again (a new generation), or re-armed since: a stale slot.
        if (e === undefined || e.generation !== slot.generation || e.inFlight || e.dueAtMs !== slot.dueAtMs) continue;
        e.inFlight = true;
        due.push({ incarnation: slot.incarnation, nodeId: e.nodeId, generation: e.generation });
      }
    }
    return due;
  }

  /**
   * A probe's answer: `undefined` reason = the backend answered Health OK.
   * The next probe is due one interval later. Returns the change in the
   * instance's word, if any; an answer for an entry that is gone or newer is
   * ignored.
   */
  probed(p: DueProbe, failure: string | undefined, nowMs: number): ProbeChange | undefined {
    const e = this.entries.get(p.incarnation);
    if (e?.generation !== p.generation) return undefined;
    e.inFlight = false;
    e.dueAtMs = nowMs + this.intervalMs;
    this.again.push({ incarnation: p.incarnation, generation: e.generation, dueAtMs: e.dueAtMs });
    const was = e.state.t;
    if (failure === undefined) {
      e.state = was === "serving" ? { ...e.state, answered: true } : { t: "serving", sinceMs: nowMs, answered: true };
      return was === "failed" ? { t: "recovered", incarnation: p.incarnation, nodeId: e.nodeId } : undefined;
    }
    e.state = was === "failed" ? e.state : { t: "failed", sinceMs: nowMs, reason: failure };
    return was === "failed" ? undefined : { t: "failed", incarnation: p.incarnation, nodeId: e.nodeId, reason: failure };
  }

  /**
   * Whether a call may go to the instance although its node is unreachable:
   * true while its probes answer (or none failed yet); false once one failed,
   * and for an instance that is not probed (its node's state decides alone).
   */
  routable(incarnation: string): boolean {
    return this.entries.get(incarnation)?.state.t === "serving";
  }

  /** The instance's word, or undefined when it is not probed. */
  stateOf(incarnation: string): OutageProbeState | undefined {
    return this.entries.get(incarnation)?.state;
  }

  /** Instances on the node serving through its agent's outage. O(instances of the node). */
  servingOn(nodeId: string): number {
    let n = 0;
    for (const inc of this.byNode.get(nodeId) ?? []) if (this.entries.get(inc)?.state.t === "serving") n++;
    return n;
  }

  /** Whether any instance is probed (the owner's timer runs only then). */
  get size(): number {
    return this.entries.size;
  }
}
