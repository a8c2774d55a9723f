import { Code, type WardenError } from "@warden/common";
import { pushOccupancy, type LoaderState } from "./loader-state.js";
import type { BackendHandle } from "./ports.js";

/**
 * A load given up after its StartBackend was sent but before its Spawned
 * arrived, with the outcome unknown (the stream broke: UNAVAILABLE; the load's
 * deadline passed: DEADLINE_EXCEEDED). The agent may well have spawned it, and
 * its start runs on, bound to the agent's own deadline, not to our stream.
 * Without an address there is nothing to stop, and dropping it left the
 * process counted nowhere until an inventory listed it — the simulation's HA
 * 8, seed 73: a second replica of a max-1 model started on the node beside it.
 * It counts on its node as an unconfirmed instance (groups, limit, memory,
 * replicas), as a journaled one after a restart does, until the node's next
 * inventory settles it: listed starting, it counts on; ready, it is adopted;
 * absent, it is gone (journal-replicas.ts nodeReported). Returns whether it was added.
 */
export function countUnknownOutcomeStart<H extends BackendHandle>(s: LoaderState<H>, a: { readonly incarnation: string; readonly nodeId: string; readonly model: string }, e: WardenError, cancelledHere: boolean): boolean {
  if (cancelledHere || (e.code !== Code.Unavailable && e.code !== Code.DeadlineExceeded)) return false;
  if (!s.unconfirmed.add({ incarnation: a.incarnation, nodeId: a.nodeId, model: a.model, address: "" })) return false;
  pushOccupancy(s, a.nodeId);
  return true;
}
