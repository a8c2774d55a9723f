import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { BackendState, StartStage, type ForeignProcessSchema, type InventoryEntrySchema, type OrphanProcessSchema, type StartBackendResponseSchema, type WatchBackendsResponseSchema } from "@warden/proto";
import type { BackendPhase, BackendProcess } from "./backend-process.js";
import type { Foreign, Orphan } from "./orphan-scan.js";
import type { StartEvent } from "./start-log.js";

export type InventoryEntryInit = MessageInitShape<typeof InventoryEntrySchema>;
export type OrphanInit = MessageInitShape<typeof OrphanProcessSchema>;
export type ForeignInit = MessageInitShape<typeof ForeignProcessSchema>;
export type StartResponseInit = MessageInitShape<typeof StartBackendResponseSchema>;
export type WatchEventInit = MessageInitShape<typeof WatchBackendsResponseSchema>;

export function backendStateOf(phase: BackendPhase): BackendState {
  switch (phase.t) {
    case "spawning":
      return BackendState.SPAWNING;
    case "loading":
      return BackendState.LOADING;
    case "ready":
      return BackendState.READY;
    case "stopping":
      return BackendState.STOPPING;
    case "exited":
      return BackendState.EXITED;
  }
}

/** One inventory entry; `memoryBytes` measured by the caller. */
export function inventoryEntryOf(proc: BackendProcess, memoryBytes: number): InventoryEntryInit {
  const sr = proc.stopRequested();
  const phase = proc.state();
  return {
    incarnation: proc.id.incarnation,
    model: proc.id.model,
    address: proc.id.address,
    pid: proc.pid,
    state: backendStateOf(phase),
    memoryBytes: BigInt(Math.max(0, Math.round(memoryBytes))),
    gpuDevice: proc.id.gpuDevice,
    startedAt: timestampFromMs(proc.id.startedAtMs),
    // reported until the process is gone
    stopRequested: sr === null || phase.t === "exited" ? undefined : { incarnation: sr.incarnation, reason: sr.reason, at: timestampFromMs(sr.atMs) },
    backend: proc.id.backend,
    loadDigest: proc.id.loadDigest,
    bundleDigest: proc.id.bundleDigest ?? "",
  };
}

export function orphanOf(o: Orphan, memoryBytes: number): OrphanInit {
  return { pid: o.pid, address: o.address, memoryBytes: BigInt(Math.max(0, Math.round(memoryBytes))), model: o.model, detail: o.detail };
}

export function foreignOf(f: Foreign): ForeignInit {
  return { pid: f.pid, address: f.address, detail: f.detail };
}

const startStages = { resolving: StartStage.RESOLVING, pulling: StartStage.PULLING, unpacking: StartStage.UNPACKING, installed: StartStage.INSTALLED } as const;

export function startResponseOf(ev: StartEvent): StartResponseInit {
  switch (ev.t) {
    case "spawned":
      return { event: { case: "spawned", value: { address: ev.address, pid: ev.pid, gpuDevice: ev.gpuDevice, bootEpoch: BigInt(ev.bootEpochMs), heartbeatSequence: ev.heartbeatSequence } } };
    case "loading":
      return { event: { case: "loading", value: {} } };
    case "pulling":
      return { event: { case: "pulling", value: { sha256: ev.sha256, path: ev.path, doneBytes: BigInt(ev.doneBytes), totalBytes: BigInt(ev.totalBytes), verified: ev.verified } } };
    case "stage":
      return { event: { case: "stage", value: { stage: startStages[ev.stage] } } };
    case "ready":
      return { event: { case: "ready", value: { address: ev.address, pid: ev.pid, memoryBytes: BigInt(Math.max(0, Math.round(ev.memoryBytes))) } } };
    case "failed":
      return { event: { case: "failed", value: { code: ev.code, message: ev.message, exitCode: ev.exitCode, lastStderrLine: ev.lastStderrLine } } };
  }
}
