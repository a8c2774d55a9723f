/** How a node known from before a restart, and not registered since, is listed. */
export type KnownAtStartState = "not-reported" | "lost";

/**
 * Nodes this coordinator knew before it (re)started — named by its journal
 * (instances it last saw alive, open stop intents) or by the operator's kept
 * settings (a drain, a limits override) — that have not registered since.
 * ListNodes and GetNode show them "not reported since restart" with what the
 * journal says runs there, so an operator never sees a leftover on a node the
 * node list does not know. A node leaves the table when it registers; once
 * the node-lost timeout has passed since start without a registration it is
 * shown lost (its journaled instances stopped counting then). One owner: the
 * coordinator's event loop. Bounded by the journal's and the settings' nodes.
 */
export class NodesKnownAtStart {
  private readonly nodes = new Map<string, KnownAtStartState>();

  constructor(nodeIds: Iterable<string>) {
    for (const id of nodeIds) if (id !== "") this.nodes.set(id, "not-reported");
  }

  /** The node registered: the node table shows it from now on. */
  heard(nodeId: string): void {
    this.nodes.delete(nodeId);
  }

  /** The node-lost timeout passed since start: every node still not registered is shown lost. */
  expire(): string[] {
    const out: string[] = [];
    for (const [id, st] of this.nodes) {
      if (st !== "not-reported") continue;
      this.nodes.set(id, "lost");
      out.push(id);
    }
    return out;
  }

  stateOf(nodeId: string): KnownAtStartState | undefined {
    return this.nodes.get(nodeId);
  }

  get size(): number {
    return this.nodes.size;
  }

  /** Node ids, sorted. */
  ids(): string[] {
    return [...this.nodes.keys()].sort();
  }
}
