import type { Event } from "@warden/proto";
import { eventTypeOf, type EventType } from "./event-type.js";

/**
 * Types that end an instance's story: after one of these the incarnation holds
 * no memory and will never be stopped, routed or adopted again.
 *
 * - `eviction.stopped`: the agent confirmed stopped / already gone (settle row 2).
 * - `leftover.reaped`: a leftover was finally confirmed gone.
 * - `backend.load-failed`: the start failed and its reservation was released —
 *   unless its outcome is unknown (`outcomeUnknown`: the start was sent, no
 *   Spawned came, the agent may run it): that one counts on its node until
 *   the node reports, so it is not an end, and a takeover restores it.
 * - `backend.exited`: the process is gone (exit detected by the agent).
 * - `instance.forgotten`: an operator removed it for a node gone for good.
 *
 * Everything else — `eviction.started` (a stop in flight), `eviction.failed`
 * (registered again, or a leftover), `eviction.retried`, `leftover.stuck`,
 * `backend.loaded`, adoption and `recovered` itself — leaves the instance alive
 * or in doubt; after a coordinator restart such an instance gets `recovered`.
 * Events without an incarnation (node.*, policy.*, unreachability.*) belong to
 * no instance and are never considered.
 */
export const terminalEventTypes: ReadonlySet<EventType> = new Set<EventType>([
  "eviction.stopped",
  "leftover.reaped",
  "backend.load-failed",
  "backend.exited",
  "instance.forgotten",
]);

/** True when `type` ends an instance's story (see {@link terminalEventTypes}). */
export function isTerminalEventType(type: EventType): boolean {
  return terminalEventTypes.has(type);
}

/** True when the event ends its instance's story. */
export function isTerminalEvent(event: Pick<Event, "payload">): boolean {
  if (event.payload.case === "backendLoadFailed" && event.payload.value.outcomeUnknown) return false;
  return terminalEventTypes.has(eventTypeOf(event));
}
