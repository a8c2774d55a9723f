import { InstanceState, NodeState } from "./gen/warden/v1/admin_pb.js";

/**
 * The words for node and instance states that filters take (`warden nodes ls
 * --state`, the dashboard's listing routes' `state=`), one table for every
 * surface so they accept the same words.
 */
export const nodeStateNames: Readonly<Record<string, NodeState>> = {
  ready: NodeState.READY,
  unreachable: NodeState.UNREACHABLE,
  lost: NodeState.LOST,
  "not-reported": NodeState.NOT_REPORTED,
};

export const instanceStateNames: Readonly<Record<string, InstanceState>> = {
  loading: InstanceState.LOADING,
  ready: InstanceState.READY,
  freed: InstanceState.FREED,
  "pending-eviction": InstanceState.PENDING_EVICTION,
  leftover: InstanceState.LEFTOVER,
  orphan: InstanceState.ORPHAN,
  unconfirmed: InstanceState.UNCONFIRMED,
};
