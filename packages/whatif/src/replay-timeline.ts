import type { Clock } from "@warden/common";
import { deadlineSignal } from "@warden/common";
import type { Loader } from "@warden/loader";
import type { PolicyPatch } from "@warden/watchdog";
import type { AdminLine, LoadLine, NodeLine, StopLine, TraceLine } from "./trace-format.js";
import type { ReplayCluster } from "./replay-world.js";

/**
 * What the recorded cluster went through besides calls, replayed at its
 * recorded time: node joins, unreachability and losses, operators' drains
 * and undrains, policy, scale and node-limit changes, LoadModel and
 * UnloadModel. Everything else in the trace (the cluster's own loads and
 * evictions) is the decision code's to make again.
 */
export type TimelineLine = NodeLine | AdminLine | (LoadLine & { readonly op: true }) | (StopLine & { readonly reason: "admin" });

/** The lines of `l` that belong on the timeline. */
export function isTimelineLine(l: TraceLine): l is TimelineLine {
  return l.t === "node" || l.t === "admin" || (l.t === "load" && l.op === true) || (l.t === "stop" && l.reason === "admin");
}

/** How the replay went with the recorded operator changes. */
export interface TimelineCounts {
  /** Changes applied at their time (policy, scale, limits, drains, loads, unloads). */
  applied: number;
  /** Changes the replayed config refused (a model it does not have, a value out of its bounds) or that had nothing to act on. */
  refused: number;
  /** Recorded policy changes to a field the candidate sets (the candidate's value holds). */
  kept: number;
}

/** How long an operator's replayed LoadModel may take before it counts as failed (a caller's deadline). */
const opLoadDeadlineMs = 600_000;

/**
 * One policy.updated change ("idleTimeoutMs=60000", "models.chat pinned=true
 * groups=[a,b]") as a patch entry; undefined when it is not one.
 */
export function parsePolicyChange(change: string): { readonly t: "field"; readonly field: string; readonly value: unknown } | { readonly t: "model"; readonly model: string; readonly pinned: boolean; readonly groups: string[] } | undefined {
  const m = /^models\.(.+) pinned=(true|false) groups=\[(.*)\]$/.exec(change);
  if (m !== null) return { t: "model", model: m[1] ?? "", pinned: m[2] === "true", groups: (m[3] ?? "").split(",").filter((g) => g !== "") };
  const eq = change.indexOf("=");
  if (eq <= 0) return undefined;
  try {
    return { t: "field", field: change.slice(0, eq), value: JSON.parse(change.slice(eq + 1)) as unknown };
  } catch {
    return undefined;
  }
}

/** Whether the candidate holds `field` (a PolicyPatch name, e.g. idleTimeoutMs) against recorded changes: named as such or as its config key (idleTimeout). */
function held(keep: ReadonlySet<string>, field: string): boolean {
  return keep.has(field) || (field.endsWith("Ms") && keep.has(field.slice(0, -2)));
}

/** Applies one recorded line to the replay's world and loader; counts into `n`. */
export function applyTimeline(l: TimelineLine, w: { readonly loader: Loader; readonly cluster: ReplayCluster; readonly clock: Clock; readonly keep: ReadonlySet<string>; readonly n: TimelineCounts }): void {
  const { loader, cluster, n } = w;
  switch (l.t) {
    case "node": {
      const node = cluster.nodes.get(l.node);
      if (node === undefined) {
        n.refused++;
        return;
      }
      n.applied++;
      if (l.ev === "joined" || l.ev === "unreachable") node.state = l.ev === "joined" ? "ready" : "unreachable";
      else if (l.ev === "lost") {
        node.lose();
        loader.onNodeLost(l.node);
      } else if (l.ev === "drain") {
        node.draining = true;
        void loader.drainNode(l.node, { force: false, stillDraining: () => node.draining });
      } else node.draining = false;
      return;
    }
    case "admin":
      applyAdmin(l, w);
      return;
    case "load": {
      if (loader.modelSpec(l.m) === undefined || cluster.nodes.get(l.node) === undefined) {
        n.refused++;
        return;
      }
      n.applied++;
      const dl = deadlineSignal(w.clock, opLoadDeadlineMs, "LoadModel");
      // A load that fails in the replay shows as the calls that wait for it: nothing else to count.
      void loader.ensureLoaded(l.m, dl.signal, l.node)
        .catch(() => undefined)
        .finally(() => {
          dl.cleanup();
        });
      return;
    }
    case "stop": {
      // The operator stopped an instance of the model on that node: the replay stops one it has there, if any.
      const inst = loader.heldOn(l.node).find((h) => h.model === l.m && !loader.isBeingStopped(h.incarnation));
      if (inst === undefined) {
        n.refused++;
        return;
      }
      n.applied++;
      void loader.stopInstance(inst.incarnation, { force: false }).catch(() => undefined);
      return;
    }
  }
}

function applyAdmin(l: AdminLine, w: { readonly loader: Loader; readonly cluster: ReplayCluster; readonly keep: ReadonlySet<string>; readonly n: TimelineCounts }): void {
  const { loader, n } = w;
  try {
    if (l.op === "scale" && l.m !== undefined) {
      loader.scale(l.m, { ...(l.min === undefined ? {} : { min: l.min }), ...(l.max === undefined ? {} : { max: l.max }) }, "replay");
    } else if (l.op === "limits" && l.node !== undefined) {
      const node = w.cluster.nodes.get(l.node);
      if (node === undefined) throw new Error("unknown node");
      node.limits = {
        ...(l.maxReplicas === undefined ? {} : { maxReplicasPerModel: l.maxReplicas }),
        ...(l.budgetBytes !== undefined ? { memoryBudget: { t: "bytes", bytes: l.budgetBytes } } : l.budgetPercent !== undefined ? { memoryBudget: { t: "percent", percent: l.budgetPercent } } : {}),
      };
    } else if (l.op === "policy") {
      const patch: Record<string, unknown> & PolicyPatch = {};
      for (const c of l.changes ?? []) {
        const p = parsePolicyChange(c);
        if (p === undefined) continue;
        if (p.t === "model") {
          if (loader.modelSpec(p.model) !== undefined) loader.patchModel(p.model, { pinned: p.pinned, groups: p.groups });
        } else if (held(w.keep, p.field)) n.kept++;
        else patch[p.field] = p.value;
      }
      // Validated as a whole by the watchdog core, as UpdatePolicy's patch is.
      if (Object.keys(patch).length > 0) loader.updatePolicy(patch);
    } else throw new Error("incomplete line");
    n.applied++;
  } catch {
    n.refused++;
  }
}
