import Table from "cli-table3";
import { timestampMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import { InstanceState, NodeState, OutageServing, Placement, type ModelInstance, type Node } from "@warden/proto";
import { formatDurationMs, wardenVersion } from "@warden/common";

/** A plain table (no colours: output is read by people and by `grep`). */
export function table(head: string[], rows: (string | number)[][]): string {
  const t = new Table({ head, style: { head: [], border: [], compact: true }, chars: { mid: "", "left-mid": "", "mid-mid": "", "right-mid": "" } });
  for (const r of rows) t.push(r.map(String));
  return t.toString();
}

function ago(ts: Timestamp | undefined, nowMs: number): string {
  if (ts === undefined) return "-";
  return `${formatDurationMs(Math.max(0, nowMs - timestampMs(ts)))} ago`;
}

export function stateName(s: InstanceState): string {
  return InstanceState[s].toLowerCase().replace(/_/g, "-");
}

/** The PLACEMENT words `models ls --help` and the README explain (spelled out: a derived name read "remote+only"). */
export function placementName(p: Placement): string {
  switch (p) {
    case Placement.LOCAL:
      return "local";
    case Placement.LOCAL_REMOTE:
      return "local+remote";
    case Placement.REMOTE_ONLY:
      return "remote-only";
    default:
      return "-";
  }
}

export function nodeStateName(s: NodeState): string {
  // Known from before the coordinator restarted, not registered since.
  if (s === NodeState.NOT_REPORTED) return "not reported since restart";
  return NodeState[s].toLowerCase();
}

/**
 * An instance's state as `models ls` shows it: a ready instance on a node
 * that stopped heartbeating is not routable, so the node's state goes with
 * it ("ready (node unreachable)") instead of a plain "ready".
 */
export function instanceStateText(i: Pick<ModelInstance, "state" | "nodeState"> & { readonly outageServing?: OutageServing }): string {
  const s = stateName(i.state);
  // The coordinator's own health probe of the backend answers: calls are still routed to it.
  if (i.outageServing === OutageServing.SERVING) return `${s} (serving, agent unreachable)`;
  if (i.outageServing === OutageServing.PROBE_FAILED) return `${s} (agent unreachable, health probe failed)`;
  return i.nodeState === NodeState.UNREACHABLE || i.nodeState === NodeState.LOST || i.nodeState === NodeState.NOT_REPORTED ? `${s} (node ${nodeStateName(i.nodeState)})` : s;
}

export function bytes(n: bigint | number): string {
  const v = Number(n);
  if (v === 0) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let x = v;
  while (x >= 1024 && i < units.length - 1) {
    x /= 1024;
    i++;
  }
  return `${x.toFixed(x >= 10 || i === 0 ? 0 : 1)}${units[i] ?? ""}`;
}

export function modelsTable(instances: readonly ModelInstance[], nowMs = Date.now()): string {
  if (instances.length === 0) return "no instances loaded";
  return table(
    ["MODEL", "NODE", "STATE", "PLACEMENT", "ADDRESS", "IN-FLIGHT", "LAST USED", "SIZE", "NOTES"],
    instances.map((i) => {
      const notes: string[] = [];
      if (i.pinned) notes.push("pinned");
      if (i.groups.length > 0) notes.push(`groups=${i.groups.join(",")}`);
      if (i.leftover !== undefined) notes.push(`stop retried ${String(i.leftover.attempts)}x${i.leftover.stuck ? " STUCK" : ""}${i.leftover.lastError === "" ? "" : `: ${i.leftover.lastError}`}`);
      return [i.model === "" ? "?" : i.model, i.nodeId, instanceStateText(i), placementName(i.placement), i.address, i.inFlight, ago(i.lastUsed, nowMs), bytes(i.sizeBytes), notes.join(" ")];
    }),
  );
}

/**
 * A warning line when the nodes' agents run different Warden versions, or one
 * other than this CLI's (the embedded agent's version is the coordinator's).
 */
export function versionWarning(nodes: readonly Node[], cliVersion = wardenVersion): string | undefined {
  const versions = new Set(nodes.map((n) => n.version));
  if (versions.size === 0 || (versions.size === 1 && versions.has(cliVersion))) return undefined;
  const which = nodes.map((n) => `${n.nodeId}=${n.version === "" ? "unknown" : n.version}`).join(", ");
  return `warning: agents and coordinator should run the same Warden version; nodes run ${which} and this CLI is ${cliVersion}`;
}

export function nodesTable(nodes: readonly Node[], nowMs = Date.now()): string {
  if (nodes.length === 0) return "no nodes registered";
  const warning = versionWarning(nodes);
  return table(
    ["NODE", "STATE", "VERSION", "DRAINING", "INSTANCES", "FOREIGN", "GPUS", "MEMORY USED", "LABELS", "LAST HEARTBEAT"],
    nodes.map((n) => {
      const r = n.resources;
      const gpus = r?.gpus ?? [];
      const used = gpus.length > 0 ? gpus.reduce((a, g) => a + Number(g.usedBytes), 0) : Number(r?.ramUsedBytes ?? 0n);
      const total = gpus.length > 0 ? gpus.reduce((a, g) => a + Number(g.totalBytes), 0) : Number(r?.ramTotalBytes ?? 0n);
      return [
        `${n.nodeId}${n.embedded ? " (embedded)" : ""}`,
        n.servingThroughOutage > 0 ? `${nodeStateName(n.state)} (${String(n.servingThroughOutage)} serving)` : nodeStateName(n.state),
        n.version === "" ? "?" : n.version,
        n.draining ? `yes (${String(n.drainRemaining)} left)` : "no",
        n.instanceCount,
        // processes in the node's port range Warden did not start (never signalled); pids in --json
        n.foreign.length === 0 ? "-" : String(n.foreign.length),
        gpus.length === 0 ? "-" : String(gpus.length),
        total === 0 ? "-" : `${bytes(used)} / ${bytes(total)}`,
        Object.entries(n.labels)
          .map(([k, v]) => `${k}=${v}`)
          .join(",") || "-",
        ago(n.lastHeartbeatAt, nowMs),
      ];
    }),
  ) + (warning === undefined ? "" : `\n${warning}`);
}
