import { formatDurationMs } from "@warden/common";
import type { ModelReplicas, Node, NodeLimits } from "@warden/proto";
import { bytes, table } from "./render.js";

/** The breaker's state in one cell: "-" when closed. */
export function blockedText(r: Pick<ModelReplicas, "blocked">): string {
  const b = r.blocked;
  if (b === undefined) return "-";
  const retry = b.retryAfterMs === 0n ? "retry due" : `retry in ${formatDurationMs(Number(b.retryAfterMs))}`;
  return `blocked: ${b.error === "" ? "cannot place" : b.error} (${String(b.failures)} failure${b.failures === 1 ? "" : "s"}, ${retry})`;
}

/** A rollout in progress in one cell: "rolling out <current>/<current + stale>", "-" when none. */
export function rolloutText(r: Pick<ModelReplicas, "rollout">): string {
  const o = r.rollout;
  return o === undefined ? "-" : `rolling out ${String(o.current)}/${String(o.current + o.stale)}`;
}

/** `models ls`' replica summary: one row per configured model; a ROLLOUT column while some model rolls out. */
export function replicasTable(replicas: readonly ModelReplicas[]): string {
  if (replicas.length === 0) return "no models configured";
  const rolling = replicas.some((r) => r.rollout !== undefined);
  return table(
    ["MODEL", "READY/DESIRED", "MIN..MAX", "LOADING", "STOPPING", "LEFTOVERS", "QUEUED", "SCALE-UP", ...(rolling ? ["ROLLOUT"] : [])],
    replicas.map((r) => [r.model, `${String(r.ready)}/${String(r.desired)}`, `${String(r.min)}..${String(r.max)}`, r.loading, r.stopping, r.leftovers, r.queued, blockedText(r), ...(rolling ? [rolloutText(r)] : [])]),
  );
}

/** The one-line answer of `models scale`. */
export function scaleText(r: ModelReplicas): string {
  return `${r.model}: replicas ${String(r.min)}..${String(r.max)} (ready ${String(r.ready)}/${String(r.desired)}${r.loading > 0 ? `, ${String(r.loading)} loading` : ""})${r.blocked === undefined ? "" : `; ${blockedText(r)}`}${r.rollout === undefined ? "" : `; ${rolloutText(r)}`}`;
}

function budgetText(l: NodeLimits | undefined): string | undefined {
  const b = l?.memoryBudget;
  if (b === undefined || b.case === undefined) return undefined;
  return b.case === "memoryBudgetBytes" ? bytes(b.value) : `${String(b.value)}%`;
}

function maxText(l: NodeLimits | undefined): string | undefined {
  return l?.maxReplicasPerModel === undefined ? undefined : String(l.maxReplicasPerModel);
}

/** Where a limit comes from: the operator's override, the agent's config, or the default. */
function limitRow(label: string, effective: string | undefined, override: string | undefined, agent: string | undefined, dflt: string): string[] {
  const source = override !== undefined ? `override${agent === undefined ? "" : `; agent: ${agent}`}` : agent !== undefined ? "agent config" : "default";
  return [label, effective ?? dflt, source];
}

/** `nodes limits`: a node's effective placement limits and where each comes from. */
export function nodeLimitsTable(n: Node): string {
  return table(
    ["LIMIT", "VALUE", "FROM"],
    [
      limitRow("max replicas per model", maxText(n.effectiveLimits), maxText(n.limitsOverride), maxText(n.agentLimits), "1"),
      limitRow("memory budget", budgetText(n.effectiveLimits), budgetText(n.limitsOverride), budgetText(n.agentLimits), "whole memory"),
    ],
  );
}
