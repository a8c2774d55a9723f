import { knows } from "./adoption.js";
import { pushOccupancy, type LoaderState } from "./loader-state.js";
import type { BackendHandle } from "./ports.js";
import type { NodeSettlement } from "./recovery-window.js";
import type { UnconfirmedReplica } from "./unconfirmed-replicas.js";

/**
 * What a restarted coordinator knows from its journal about instances on
 * nodes not heard from yet (unconfirmed-replicas.ts): restored at start,
 * settled when the node reports, is lost or stays unregistered past the
 * coordinator's lost timeout, or forgotten by an operator. The Loader's
 * `journalReplicas`; the table itself lives in LoaderState (`unconfirmed`),
 * read by replica counting (replica-routing.ts) and placement, and pushed to
 * the watchdog as occupancy of their node (groups, limit, memory).
 */
export class JournalReplicas<H extends BackendHandle> {
  private settledListener: ((nodeId: string, how: NodeSettlement) => void) | undefined;

  constructor(private readonly s: LoaderState<H>) {}

  /** Told of every node report and loss (the recovery window's input: recovery-window.ts). One listener. */
  onNodeSettled(listener: ((nodeId: string, how: NodeSettlement) => void) | undefined): void {
    this.settledListener = listener;
  }

  /** @internal the node was lost: its entries were dropped. */
  nodeLost(nodeId: string): void {
    if (this.s.unconfirmed.removeNode(nodeId).length > 0) pushOccupancy(this.s, nodeId);
    this.settledListener?.(nodeId, "lost");
  }

  /**
   * At start, after the open stop intents became leftovers: every instance
   * whose last journaled event was not terminal and that the loader does not
   * track otherwise counts as an unconfirmed replica on its node. Returns how
   * many were added (entries without a node, model or incarnation are skipped).
   */
  restore(entries: readonly UnconfirmedReplica[]): number {
    let added = 0;
    const nodes = new Set<string>();
    for (const e of entries) {
      if (e.incarnation === "" || e.nodeId === "" || e.model === "" || knows(this.s, e.incarnation)) continue;
      if (this.s.unconfirmed.add(e)) {
        added++;
        nodes.add(e.nodeId);
      }
    }
    for (const nodeId of nodes) pushOccupancy(this.s, nodeId);
    return added;
  }

  /**
   * The node's inventory was just reconciled (in the same turn): the entries
   * it reported ready were adopted from it, the ones it does not list are not
   * running. Either way the journal's word about them is settled. An entry the
   * inventory lists but that was not adopted (`running`: every incarnation the
   * inventory lists as not exited) is still starting there — a load the
   * previous leader began — and keeps counting until a later inventory
   * reports it ready (adopted) or gone: otherwise, during its load, it would
   * count nowhere and a conflicting model could start beside it.
   */
  nodeReported(nodeId: string, running?: Pick<ReadonlySet<string>, "has">): UnconfirmedReplica[] {
    const out: UnconfirmedReplica[] = [];
    for (const u of [...this.s.unconfirmed.onNode(nodeId)]) {
      if (running?.has(u.incarnation) === true && !knows(this.s, u.incarnation)) continue;
      this.s.unconfirmed.remove(u.incarnation);
      out.push(u);
    }
    if (out.length > 0) pushOccupancy(this.s, nodeId);
    this.settledListener?.(nodeId, "reported");
    return out;
  }

  /**
   * The lost timeout passed since start: entries on nodes that never
   * registered stop counting (a node that did register reports soon, or goes
   * lost through the node table like any other). Returns what was dropped.
   */
  expireUnregistered(): UnconfirmedReplica[] {
    const out: UnconfirmedReplica[] = [];
    for (const nodeId of [...this.s.unconfirmed.nodes()]) {
      if (this.s.o.agents.agent(nodeId) !== undefined) continue;
      out.push(...this.s.unconfirmed.removeNode(nodeId));
      pushOccupancy(this.s, nodeId);
    }
    return out;
  }

  has(incarnation: string): boolean {
    return this.s.unconfirmed.get(incarnation) !== undefined;
  }

  /** Entries of `model`, every node (ListModels, placement). */
  ofModel(model: string): IterableIterator<UnconfirmedReplica> {
    return this.s.unconfirmed.ofModel(model);
  }

  count(model: string): number {
    return this.s.unconfirmed.count(model);
  }

  list(): UnconfirmedReplica[] {
    return this.s.unconfirmed.list();
  }
}

/** ForgetInstance of an entry known only from the journal: it stops counting, audited as instance.forgotten. */
export function forgetUnconfirmed<H extends BackendHandle>(s: LoaderState<H>, incarnation: string, operator: string, note: string): boolean {
  const r = s.unconfirmed.remove(incarnation);
  if (r === undefined) return false;
  pushOccupancy(s, r.nodeId);
  s.o.events.emit({ type: "instance.forgotten", nodeId: r.nodeId, model: r.model, address: r.address, incarnation, operator, note });
  return true;
}
