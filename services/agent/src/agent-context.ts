import type { Clock, Logger } from "@warden/common";
import type { AgentConfig } from "./agent-config.js";
import type { ArtifactCache } from "./artifact-cache.js";
import type { BundleInstaller } from "./backend-bundle.js";
import type { BackendProcess, BackendProcessDeps } from "./backend-process.js";
import type { BackendRecord } from "./backend-record.js";
import type { BackendTable } from "./backend-table.js";
import type { MemoryReading } from "./memory-probe.js";
import type { LeaderFence } from "./leader-fence-store.js";
import type { ModelLocks } from "./model-lock.js";
import type { PortAllocator } from "./port-allocator.js";
import type { PortRangeScan } from "./port-range-scan.js";
import type { AgentMark } from "./process-mark.js";
import type { WatchEventInit } from "./proto-views.js";
import type { RecordStore } from "./record-store.js";
import type { StartRegistry } from "./start-registry.js";
import type { WatchHub } from "./watch-hub.js";
import type { ReportSequence } from "./report-sequence.js";
import type { PendingSpawns } from "./pending-spawns.js";

/**
 * What the agent's parts share, built once by createAgent. Each piece of
 * mutable state has one owner here (the table, the start registry, the scan,
 * the port allocator, the record store); the parts reach it only through them.
 */
export interface AgentContext {
  readonly config: AgentConfig;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Environment the catalog's allow-list draws from. */
  readonly envSource: Readonly<Record<string, string | undefined>>;
  readonly procRoot: string;
  /** Where backends' stdout/stderr files live (under the state dir). */
  readonly logDir: string;
  readonly mark: AgentMark;
  /**
   * The backends' bearer token (agent config `backendTokenFile`), when set:
   * given to each backend it starts as LOCALAI_GRPC_AUTH_TOKEN and sent on the
   * agent's own calls to them (readiness and health checks, Free).
   */
  readonly backendAuth: BackendAuth | undefined;
  readonly records: RecordStore;
  readonly ports: PortAllocator;
  readonly locks: ModelLocks;
  /** The content-addressed artifact cache under modelsPath; undefined without a modelsPath (artifacts refused). */
  readonly artifacts: ArtifactCache | undefined;
  /** Backend bundles installed under modelsPath (backend-bundle.ts); undefined without a modelsPath. */
  readonly bundles: BundleInstaller | undefined;
  readonly hub: WatchHub<WatchEventInit>;
  readonly probe: (pids: readonly number[], signal?: AbortSignal) => Promise<MemoryReading>;
  readonly table: BackendTable;
  /** Starts past their fence check whose process the table does not hold yet (listed in inventories). */
  readonly pendingSpawns: PendingSpawns;
  readonly starts: StartRegistry;
  /** This boot's epoch (ms) and Heartbeat report sequence (report-sequence.ts). */
  readonly bootEpochMs: number;
  readonly reports: ReportSequence;
  readonly scan: PortRangeScan;
  /** The newest leader epoch seen; every mutating command passes it (leader-fence.ts). */
  readonly fence: LeaderFence;
  /** The agent's lifetime: aborted by close(). */
  readonly closing: AbortSignal;
  /** Aborted by endWatches() (the process is stopping) or close(): WatchBackends streams end then, so the server drains at once. */
  readonly watchesEnded: AbortSignal;
  readonly processDeps: BackendProcessDeps;
  /** True once start() adopted the state dir's backends. */
  isStarted(): boolean;
  /** Writes a process's record, logging (not throwing) a failure. */
  persist(p: BackendProcess): void;
  watchEvent(p: BackendProcess, event: WatchEventInit["event"]): void;
}

/** The agent's side of the backends' shared token. */
export interface BackendAuth {
  /** Environment for a started backend. */
  readonly env: Readonly<Record<string, string>>;
  /** Client headers for calls to a backend. */
  readonly headers: Readonly<Record<string, string>>;
}

/** The record of a process as it stands now. */
export function recordOf(p: BackendProcess): BackendRecord {
  return {
    version: 1,
    incarnation: p.id.incarnation,
    model: p.id.model,
    backend: p.id.backend,
    address: p.id.address,
    pid: p.pid,
    pidStartTime: p.id.pidStartTime,
    gpuDevice: p.id.gpuDevice,
    startedAtMs: p.id.startedAtMs,
    loadDigest: p.id.loadDigest,
    ...(p.id.artifactDigests === undefined ? {} : { artifactDigests: [...p.id.artifactDigests] }),
    ...(p.id.bundleDigest === undefined ? {} : { bundleDigest: p.id.bundleDigest }),
    phase: p.state().t === "ready" || (p.state().t === "stopping" && p.stopRequested() !== null) ? "ready" : "loading",
    stopRequested: p.stopRequested(),
  };
}
