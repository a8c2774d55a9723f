import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { LoadJob, LoadJobPhase } from "@warden/loader";
import { LoadJobPhase as WirePhase, LoadJobSchema, LoadJobState, type LoadJob as WireLoadJob } from "@warden/proto";

export const loadJobPhaseToWire: Readonly<Record<LoadJobPhase, WirePhase>> = {
  waiting_for_recovery: WirePhase.WAITING_FOR_RECOVERY,
  waiting_for_instance: WirePhase.WAITING_FOR_INSTANCE,
  waiting_for_node: WirePhase.WAITING_FOR_NODE,
  starting: WirePhase.STARTING,
  loading: WirePhase.LOADING,
  pulling: WirePhase.PULLING,
  verifying: WirePhase.VERIFYING,
  resolving: WirePhase.RESOLVING,
  unpacking: WirePhase.UNPACKING,
};

const states: Readonly<Record<LoadJob["t"], LoadJobState>> = {
  waiting: LoadJobState.WAITING,
  loading: LoadJobState.LOADING,
  failed: LoadJobState.FAILED,
};

/** A load job as ListModels shows it (ModelReplicas.load_job); `nowMs` is the monotonic clock. */
export function loadJobToWire(job: LoadJob, nowMs: number): WireLoadJob {
  return create(LoadJobSchema, {
    model: job.model,
    incarnation: job.incarnation,
    state: states[job.t],
    phase: loadJobPhaseToWire[job.phase],
    nodeId: job.t === "waiting" ? "" : (job.nodeId ?? ""),
    reason: job.t === "loading" ? "" : job.reason,
    code: job.t === "failed" ? job.code : "",
    since: timestampFromMs(job.sinceWallMs),
    forMs: BigInt(Math.max(0, Math.round(nowMs - job.sinceMs))),
    actor: job.actor ?? "",
    ...(job.t === "loading" ? { bytesDone: BigInt(job.bytesDone ?? 0), bytesTotal: BigInt(job.bytesTotal ?? 0), bytesPerSecond: BigInt(Math.round(job.bytesPerSecond ?? 0)) } : {}),
  });
}
