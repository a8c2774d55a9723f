import type { CoreState } from "./core-state.js";
import type { ExplicitSelection } from "./decision.js";
import { detach } from "./detach.js";
import type { EvictionReason } from "./stop-command.js";

/** Options of an explicit stop. */
export interface ExplicitStopOptions {
  readonly reason: Extract<EvictionReason, "admin" | "drain" | "config" | "health" | "retry" | "scale-down" | "rollout">;
  /** Skip the busy wait and `Free()`. @default false */
  readonly force?: boolean;
}

/**
 * Explicit paths (admin unload, drain, config removal, health failure,
 * reconciler retry): the named instance in any state — pinned, busy,
 * loading or freed. A pending one joins the stop already in flight.
 */
export function selectExplicit(st: CoreState, incarnation: string, options: ExplicitStopOptions): ExplicitSelection {
  const rec = st.records.get(incarnation);
  if (rec === undefined) return { t: "unknown" };
  const s = rec.state;
  switch (s.t) {
    case "reserved":
      return { t: "reserved" };
    case "pending":
      return { t: "joined", command: s.command };
    case "loading":
    case "ready":
    case "freed":
      return { t: "stop", command: detach(st, rec, options.reason, options.force ?? false, undefined) };
  }
}

/** Explicit selection of every instance on a node (drain). */
export function selectNode(st: CoreState, nodeId: string, options: ExplicitStopOptions): { readonly incarnation: string; readonly selection: ExplicitSelection }[] {
  const n = st.nodes.get(nodeId);
  if (n === undefined) return [];
  return [...n.instances].map((r) => ({ incarnation: r.incarnation, selection: selectExplicit(st, r.incarnation, options) }));
}

/** Explicit selection of every instance of a model (config removal). */
export function selectModel(st: CoreState, model: string, options: ExplicitStopOptions): { readonly incarnation: string; readonly selection: ExplicitSelection }[] {
  const set = st.byModel.get(model);
  if (set === undefined) return [];
  return [...set].map((r) => ({ incarnation: r.incarnation, selection: selectExplicit(st, r.incarnation, options) }));
}
