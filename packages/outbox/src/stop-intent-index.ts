import type { StopIntent } from "./journal-record.js";

/**
 * The open stop intents by incarnation, and by node: every heartbeat asks
 * which intents are open on its node (NodeTable's gone-intent count) and
 * whether one incarnation has an intent (each inventory entry's fence), so
 * both answers are lookups, not a copy and a walk of every open intent.
 */
export class StopIntentIndex {
  private readonly byIncarnation = new Map<string, StopIntent>();
  private readonly byNode = new Map<string, Set<string>>();

  get size(): number {
    return this.byIncarnation.size;
  }

  get(incarnation: string): StopIntent | undefined {
    return this.byIncarnation.get(incarnation);
  }

  has(incarnation: string): boolean {
    return this.byIncarnation.has(incarnation);
  }

  set(incarnation: string, intent: StopIntent): void {
    this.delete(incarnation);
    this.byIncarnation.set(incarnation, intent);
    let on = this.byNode.get(intent.nodeId);
    if (on === undefined) {
      on = new Set();
      this.byNode.set(intent.nodeId, on);
    }
    on.add(incarnation);
  }

  delete(incarnation: string): void {
    const old = this.byIncarnation.get(incarnation);
    if (old === undefined) return;
    this.byIncarnation.delete(incarnation);
    const on = this.byNode.get(old.nodeId);
    on?.delete(incarnation);
    if (on?.size === 0) this.byNode.delete(old.nodeId);
  }

  values(): IterableIterator<StopIntent> {
    return this.byIncarnation.values();
  }

  /** Incarnations with an open intent on `nodeId` (a live view: copy it before awaiting). */
  onNode(nodeId: string): ReadonlySet<string> {
    return this.byNode.get(nodeId) ?? noIncarnations;
  }
}

const noIncarnations: ReadonlySet<string> = new Set();
