import { create } from "@bufbuild/protobuf";
import { EvictionReason, EvictionStartedSchema, EvictionStoppedSchema, RecoveredSchema, type Event } from "@warden/proto";
import type { EventInit } from "./event-factory.js";

/**
 * Payload builders for tests of this and sibling packages.
 * @internal
 */
export function evictionStarted(init: { nodeId: string; model: string; incarnation: string; address?: string }): EventInit {
  return {
    nodeId: init.nodeId,
    model: init.model,
    incarnation: init.incarnation,
    address: init.address ?? "127.0.0.1:5000",
    payload: { case: "evictionStarted", value: create(EvictionStartedSchema, { reason: EvictionReason.LRU, trigger: "test" }) },
  };
}

/** @internal */
export function evictionStopped(init: { nodeId: string; model: string; incarnation: string; address?: string }): EventInit {
  return {
    nodeId: init.nodeId,
    model: init.model,
    incarnation: init.incarnation,
    address: init.address ?? "127.0.0.1:5000",
    payload: { case: "evictionStopped", value: create(EvictionStoppedSchema, { reason: EvictionReason.LRU }) },
  };
}

/** @internal */
export function recoveredPayload(lastEventType: string): Extract<Event["payload"], { case: "recovered" }> {
  return { case: "recovered", value: create(RecoveredSchema, { lastEventType }) };
}
