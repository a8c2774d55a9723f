import { create } from "@bufbuild/protobuf";
import { EvictionFailedOutcome, EvictionFailedSchema, EvictionReason, type Event } from "@warden/proto";
import type { Outbox, StopIntent } from "@warden/outbox";
import type { EventHub } from "../admin/event-hub.js";

/**
 * Evictions the previous coordinator began (`eviction.started` journaled) and
 * never settled — it was killed while the stop ran, possibly before the stop
 * intent was written (the lock, busy wait and Free come first). The stop's
 * outcome is unknown, so the instance must stay accounted and never be
 * routable: each gets a durable stop intent (so it is a leftover from the first
 * moment, even while its node has not registered, and after another restart)
 * and the eviction is closed in the audit trail as failed → leftover, the same
 * settle as a stop that timed out (DESIGN §3.2 row 4). Without this, the node's
 * first inventory adopted the instance as ready and routable, and its
 * eviction.started was never followed by a stopped or failed.
 *
 * An orphan's stop (reason orphan, incarnation `pid:<n>`) is closed the same
 * way but gets no stop intent: the orphan tracker owns it by pid.
 *
 * Returns the stop intents to restore as leftovers (the open ones included).
 */
export async function settleUnsettledEvictions(outbox: Outbox, hub: EventHub, unsettled: readonly Event[]): Promise<StopIntent[]> {
  for (const started of unsettled) {
    if (started.payload.case !== "evictionStarted") continue;
    const reason = started.payload.value.reason;
    // A reason number from a newer coordinator has no name here.
    const reasonName = (EvictionReason as unknown as Record<number, string | undefined>)[reason];
    // An orphan's stop (`pid:<n>`) names no incarnation an agent minted: it gets no intent (a
    // StopBackend for it would name nothing); the node's next report lists the orphan again if
    // it still runs, and the orphan tracker stops it by pid after its grace.
    const orphan = reason === EvictionReason.ORPHAN;
    if (!orphan && !outbox.openStopIntents().some((i) => i.incarnation === started.incarnation)) {
      await outbox.recordStopIntent({ incarnation: started.incarnation, nodeId: started.nodeId, model: started.model, address: started.address, reason: (reasonName ?? "unspecified").toLowerCase() });
    }
    await hub.publish({
      nodeId: started.nodeId,
      model: started.model,
      address: started.address,
      incarnation: started.incarnation,
      payload: { case: "evictionFailed", value: create(EvictionFailedSchema, { reason, outcome: EvictionFailedOutcome.LEFTOVER, error: "outcome unknown: the coordinator restarted before the stop settled" }) },
    });
  }
  return outbox.openStopIntents();
}
