import type { Checker } from "./checker.js";
import type { HaCluster } from "../ha/ha-cluster.js";

/**
 * The HA profile's invariants. Checker 4 (epochs strictly
 * increase) and the carry-over of the old leader's stop intents are judged by
 * the cluster at each takeover (ha/ha-cluster.ts); here:
 * 1. at no instant do two processes act as leader by the lease core's own
 *    `isLeaderAt`, each on its own (drifting, maybe stopped) clock;
 * 2. no agent applies a command whose epoch is older than the newest it has
 *    seen (ground truth: every command an agent's fence judged, with its epoch,
 *    against the newest epoch any command brought that agent — lowered only by
 *    an amnesia restart, which loses the fence with the records);
 * 3. a zombie's command (an epoch older than the newest won) never stops or
 *    starts anything on an agent that has seen the newer epoch — the fence
 *    refuses it (counted `ha.zombie-refused`). One that reaches an agent the new
 *    leader has not commanded yet is accepted (the fence cannot know better):
 *    counted `ha.zombie-applied-unfenced`, and the cross-generation checkers
 *    (phantoms, central rule, convergence) judge what it did.
 */
export function haCheckers(ha: HaCluster): Checker[] {
  const newestSeen = new Map<string, bigint>();
  let installed = false;
  return [
    {
      name: "ha-lease",
      afterStep(ctx) {
        if (!installed) {
          installed = true;
          ctx.world.onFence = (d) => {
            const w = ctx.world;
            let seen = newestSeen.get(d.nodeId) ?? 0n;
            // Only an amnesia restart lowers an agent's fence: from then on it has seen only what came since.
            if (d.newestBefore < seen && d.newestBefore === 0n) seen = 0n;
            const stale = d.epoch < seen;
            if (stale && d.accepted) ctx.report("HA 2 stale epoch applied", `${d.nodeId} applied ${d.kind} ${d.incarnation} from epoch ${d.epoch.toString()} after seeing epoch ${seen.toString()}`);
            if (stale && !d.accepted) w.coverage.hit("ha.zombie-refused");
            if (!stale && d.accepted && d.epoch > 0n && d.epoch < BigInt(ha.maxEpoch())) w.coverage.hit("ha.zombie-applied-unfenced");
            if (d.epoch > seen) seen = d.epoch;
            newestSeen.set(d.nodeId, seen);
          };
        }
        const leaders = ha.leadersNow();
        if (leaders.length > 1) ctx.report("HA 1 one leader", `${leaders.join(" and ")} both act as leader by isLeaderAt on their own clocks`);
      },
      // HA 11: after the quiet phase (every process up, the stream whole) one process leads.
      atQuiescence(ctx) {
        if (ha.leadersNow().length !== 1) ctx.report("HA 11 a leader after quiescence", `no process leads after the quiet phase (epochs won: ${ha.epochs.slice(-3).join(", ")})`);
      },
    },
  ];
}
