import type { Event } from "@warden/proto";
import type { Cancel, Clock, Logger } from "@warden/common";
import type { Loader } from "@warden/loader";

/**
 * At start (after the open stop intents became leftovers): every instance the
 * journal last saw alive — a `recovered` event was just written for each —
 * counts as an unconfirmed replica on its node (the loader's journalReplicas)
 * until that node reports or is lost. A node that has still not registered
 * `lostAfterMs` after start is treated as lost for them, the same wait as for
 * a registered node gone silent: they stop counting then. Returns the expiry
 * timer's cancel.
 */
export function restoreJournalReplicas(
  loader: Pick<Loader, "journalReplicas">,
  recovered: readonly Event[],
  o: { readonly clock: Clock; readonly log: Logger; readonly lostAfterMs: number },
): Cancel | undefined {
  const added = loader.journalReplicas.restore(recovered.map((e) => ({ incarnation: e.incarnation, nodeId: e.nodeId, model: e.model, address: e.address })));
  if (added === 0) return undefined;
  o.log.info("journal replicas restored as unconfirmed", { count: added });
  return o.clock.setTimer(o.lostAfterMs, () => {
    const dropped = loader.journalReplicas.expireUnregistered();
    if (dropped.length > 0) {
      o.log.warn("journal replicas on nodes that never registered stop counting", { count: dropped.length, lostAfterMs: o.lostAfterMs, nodes: [...new Set(dropped.map((u) => u.nodeId))].slice(0, 32) });
    }
  });
}
