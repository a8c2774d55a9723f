/**
 * The coordinator's must-not-lose settings besides the journal:
 * small keyed records, each written whole with a revision check, read back
 * in full once at start (port; the JetStream KV implementation is
 * `kv-state-store.ts`, the single coordinator's file in its state dir
 * `../config/file-state-store.ts`).
 *
 * Contract:
 * - `put` resolves only once the write is durable (in HA: acknowledged by a
 *   quorum of the bucket's replicas), with the entry's new revision.
 * - `put` / `remove` are revision-checked: `expectedRevision` is the revision
 *   the caller last read (0: the key must not exist). A mismatch is ABORTED
 *   and writes nothing, so two writers (an old leader waking up, say) cannot
 *   silently overwrite each other.
 * - `load` returns every entry of a section, with revisions, for the start-up
 *   read; it is not a hot-path call.
 * - No quorum: UNAVAILABLE naming the store, within the call's deadline.
 */
export type StateSection =
  /** Drained nodes: id = node id; value = { force, operator, sinceMs }. */
  | "drain"
  /** Nodes declared lost by an operator: id = node id; value = { reason, operator, atMs }. */
  | "lost-node"
  /** Instances an operator forgot: id = incarnation; value = { operator, note, atMs }. */
  | "forgotten"
  /** The UpdatePolicy patch as applied: id = "cluster" or a model name; value = the patch fields. */
  | "policy"
  /** Scale settings set through ScaleModel: id = model; value = the ScalePatch. */
  | "scale"
  /** Per-node placement-limit overrides (SetNodeLimits): id = node id; value = NodeLimits. */
  | "node-limits";

export const stateSections: readonly StateSection[] = ["drain", "lost-node", "forgotten", "policy", "scale", "node-limits"];

export interface StateEntry {
  /** The value as written (JSON). */
  readonly value: unknown;
  /** Pass back as `expectedRevision` to change or remove it. */
  readonly revision: number;
}

export interface DurableStateStore {
  /** What the store is called in errors (e.g. the bucket name). */
  readonly name: string;
  get(section: StateSection, id: string, signal?: AbortSignal): Promise<StateEntry | undefined>;
  load(section: StateSection, signal?: AbortSignal): Promise<ReadonlyMap<string, StateEntry>>;
  put(section: StateSection, id: string, value: unknown, expectedRevision: number, signal?: AbortSignal): Promise<number>;
  remove(section: StateSection, id: string, expectedRevision: number, signal?: AbortSignal): Promise<void>;
}
