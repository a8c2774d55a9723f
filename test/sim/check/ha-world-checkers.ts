import type { Checker } from "./checker.js";
import type { HaCluster } from "../ha/ha-cluster.js";
import type { TruthProcess } from "../world/ground-truth.js";

/**
 * The HA invariants judged on the world's ground truth (what really happened
 * to backends, the journal stream and the audit stream), not on Warden's view:
 * 5. no call that changes a backend — a start or stop an agent applied, an
 *    orphan killed, a Free() a backend ran — was sent by a generation that was
 *    not the leader of the epoch in force when it sent it (a resumed or
 *    double-won ex-leader; the fences must neutralise everything it sends);
 * 6. no journal record written with an older leader epoch is stored after
 *    one written with a newer epoch (an ex-leader's append accepted);
 * 7. no audit event reaches the stream from a generation that is no longer
 *    the leader of the epoch in force once an event of a newer leader epoch
 *    is there (a new leader re-publishing what its predecessor journaled but
 *    did not publish is its own act: allowed; a publish the ex-leader handed
 *    over before its pause may still land among that backlog, before the new
 *    term's own events — the stream's condition refuses it behind those);
 * 8. at every start the leader sends, the node's real processes that the
 *    leader can know of (accounted by it, reported by the node, or named in
 *    the journal, unless an operator forgot it) leave room: no member of an exclusive group of the model,
 *    no more than the per-node limit, no more than the node's
 *    maxReplicasPerModel of the model;
 * 9. the audit stream, read in order, never holds an event of an older
 *    `leader_epoch` after one of a newer, copies of an event already there
 *    aside (a resumed ex-leader's delayed
 *    publish refused by the stream; a new leader's re-published backlog of
 *    its predecessor's events out before its own).
 */
export function haWorldCheckers(ha: HaCluster): Checker[] {
  let installed = false;
  let newestOnStream = 0n;
  /** Ids on the stream: a copy stored again after the duplicate window (at-least-once; consumers de-duplicate by id) is not a new event. */
  const onStream = new Set<string>();
  return [
    {
      name: "ha-world",
      afterStep(ctx) {
        const w = ctx.world;
        if (!installed) {
          installed = true;
          w.onStaleEffect = (what) => {
            ctx.report("HA 5 no effect from an ex-leader", `${what}, sent after epoch ${String(ha.maxEpoch())} was won`);
          };
          w.disk.onStaleAppend = (record, generation, epoch, newest) => {
            const what = record.kind === "event" ? `event ${record.event.payload.case ?? ""} ${record.event.incarnation}` : record.kind === "stop-intent" || record.kind === "stop-intent-cleared" ? `${record.kind} ${record.incarnation}` : record.kind;
            ctx.report("HA 6 ex-leader's append accepted", `generation ${String(generation)} (epoch ${epoch.toString()}) appended ${what} after a record of epoch ${newest.toString()}`);
          };
          w.nats.onStored = (e, epoch) => {
            const newerOnStream = newestOnStream > epoch;
            const copy = onStream.has(e.id);
            onStream.add(e.id);
            if (e.leaderEpoch < newestOnStream && !copy) ctx.report("HA 9 audit stream epoch order", `event ${e.payload.case ?? ""} ${e.incarnation} ${e.id} of leader epoch ${e.leaderEpoch.toString()} stored after an event of leader epoch ${newestOnStream.toString()} (published by the generation of epoch ${epoch.toString()})`);
            if (e.leaderEpoch > newestOnStream) newestOnStream = e.leaderEpoch;
            if (!w.staleSender(epoch) || !newerOnStream) return;
            ctx.report("HA 7 no event from an ex-leader", `event ${e.payload.case ?? ""} ${e.incarnation} ${e.id} reached the audit stream from the generation of epoch ${epoch.toString()} after epoch ${String(ha.maxEpoch())} was won and an event of leader epoch ${newestOnStream.toString()} was on the stream`);
          };
        }
      },
      onStartSent(ctx, nodeId, model, incarnation) {
        const c = ctx.coord;
        if (c === undefined || c.loader.heldInstance(incarnation) === undefined) return;
        const w = ctx.world;
        const spec = c.loader.modelSpec(model);
        const agent = w.agents.get(nodeId);
        if (spec === undefined || agent === undefined) return;
        const reported = new Set((c.nodes.get(nodeId)?.inventory ?? []).map((e) => e.incarnation));
        const leftovers = new Set(c.loader.leftoverList().map((l) => l.incarnation));
        const accounted = (inc: string): boolean => c.loader.core.instance(inc) !== undefined || c.loader.heldInstance(inc) !== undefined || leftovers.has(inc);
        // An operator's ForgetInstance is an audited word that the instance no longer counts ("for a
        // node gone for good"; Warden ignores it from then on, as the other checkers exempt it): a
        // forgotten process the node still reports or the journal still names is not Warden's to
        // count, unless Warden holds it again.
        // A node registered with this leader that has not sent its first inventory yet: the leader cannot
        // know what runs there, so everything its agent holds counts (placement must wait for the report).
        const unreported = c.nodes.get(nodeId)?.inventory === undefined;
        const knowable = (p: TruthProcess): boolean =>
          agent.hasRecord(p.incarnation) &&
          (accounted(p.incarnation) || (!w.truth.forgotten.has(p.incarnation) && (unreported || reported.has(p.incarnation) || w.disk.journaledIncarnations.has(p.incarnation))));
        const here: TruthProcess[] = [];
        for (const p of w.truth.liveOn(nodeId)) if (p.incarnation !== incarnation && knowable(p)) here.push(p);
        const describe = (ps: readonly TruthProcess[]): string => ps.map((p) => `${p.model} ${p.incarnation} (${c.loader.core.stateOf(p.incarnation) ?? (leftovers.has(p.incarnation) ? "leftover" : reported.has(p.incarnation) ? "reported" : w.disk.journaledIncarnations.has(p.incarnation) ? "journal only" : "node not reported yet")})`).join(", ");
        const groupOf = (m: string): readonly string[] => c.loader.modelSpec(m)?.groups ?? [];
        const conflicts = here.filter((p) => p.model !== model && groupOf(p.model).some((g) => spec.groups.includes(g)));
        if (conflicts.length > 0) ctx.report("HA 8 placement on ground truth", `start of ${model} ${incarnation} on ${nodeId} beside a member of its exclusive group: ${describe(conflicts)}`);
        const limit = c.loader.getPolicy().limitPerNode;
        const pinned = here.some((p) => c.loader.core.isPinned(p.model));
        if (limit > 0 && here.length + 1 > limit && !pinned) ctx.report("HA 8 placement on ground truth", `start of ${model} ${incarnation} on ${nodeId} with ${String(here.length)} live instances there (limit ${String(limit)}): ${describe(here)}`);
        if (w.truth.explicitLoads.has(`${model} ${nodeId}`)) return;
        const same = here.filter((p) => p.model === model);
        const perNode = c.nodes.limitsOf(nodeId).maxReplicasPerModel ?? 1;
        if (same.length + 1 > perNode) ctx.report("HA 8 placement on ground truth", `start of ${model} ${incarnation} on ${nodeId} with ${String(same.length)} live replicas there (maxReplicasPerModel ${String(perNode)}): ${describe(same)}`);
      },
    },
  ];
}
