import type { ArtifactSpec, LoadSettings } from "@warden/common";

/**
 * The loader's ports: everything it does to the outside world goes through
 * these narrow interfaces, so the seeded simulation can drive it unmodified.
 */

/**
 * Where a start sits among its node's Heartbeat reports (agent.proto
 * `Spawned.heartbeat_sequence`): a report of `bootEpoch` numbered at or below
 * `sequence` took its inventory before the process existed.
 */
export interface ReportFloor {
  readonly bootEpoch: bigint;
  readonly sequence: bigint;
}

/** Progress of a start, as the agent streams it (DESIGN §4). */
export type StartEvent =
  | { readonly t: "spawned"; readonly address: string; readonly pid: number; readonly gpu: number | undefined; readonly reportFloor?: ReportFloor }
  | { readonly t: "loading" }
  /** An artifact's pull before the spawn (one per 1/32 of it, and once verified). */
  | { readonly t: "pulling"; readonly sha256: string; readonly doneBytes: number; readonly totalBytes: number; readonly verified: boolean }
  /** A backend bundle's install before the spawn: its image's manifest read, its layers fetched (their bytes as `pulling`), extracted, in place. */
  | { readonly t: "stage"; readonly stage: "resolving" | "pulling" | "unpacking" | "installed" }
  | { readonly t: "ready"; readonly address: string; readonly memoryBytes: number }
  | { readonly t: "failed"; readonly code: string; readonly message: string; readonly exitCode: number | undefined; readonly lastStderrLine: string };

export interface StartRequest {
  readonly incarnation: string;
  readonly model: string;
  readonly backend: string;
  readonly options: readonly string[];
  readonly modelFile: string;
  /** Files the agent pulls by digest before spawning; absent = none. */
  readonly artifacts?: readonly ArtifactSpec[];
  readonly contextSize: number;
  /** Typed LoadModel fields (backendModel, gpuLayers, …); unset = LocalAI's default at the agent. */
  readonly load: LoadSettings;
  /** Who asked (an operator's principal); absent for the loader's own decisions. The agent logs it. */
  readonly requestedBy?: string;
  /** The load settings' digest (load-digest.ts): the agent keeps it and reports it in its inventory. */
  readonly loadDigest?: string;
}

export type StopAnswer = { readonly t: "stopped" } | { readonly t: "alreadyGone"; readonly replacedBy: string };

export interface StopRequest {
  readonly address: string;
  readonly incarnation: string;
  readonly force: boolean;
  readonly reason: string;
  /** Who asked (an operator's principal); absent for the loader's own decisions. The agent logs it. */
  readonly requestedBy?: string;
}

/**
 * A Free as the agent answers it: `freed` (the backend unloaded its model),
 * `unsupported` (the backend has no Free) or `alreadyGone` (the agent runs no
 * such incarnation, or it is already stopping). Errors reject.
 */
export type FreeAnswer = { readonly t: "freed" } | { readonly t: "unsupported" } | { readonly t: "alreadyGone" };

export interface FreeRequest {
  readonly address: string;
  readonly incarnation: string;
  /** Who asked for the stop this Free belongs to; absent for the loader's own decisions. */
  readonly requestedBy?: string;
}

/** One node's agent (AgentService), in process for the embedded agent or over gRPC. */
export interface AgentPort {
  /** Streams the start's progress; aborting the signal cancels the start. */
  startBackend(request: StartRequest, options: { readonly signal: AbortSignal }): AsyncIterable<StartEvent>;
  /** Rejects with a WardenError on failure (UNAVAILABLE, DEADLINE_EXCEEDED, …). */
  stopBackend(request: StopRequest, options: { readonly signal: AbortSignal; readonly timeoutMs: number }): Promise<StopAnswer>;
  /**
   * Backend.Free of one incarnation, sent by the agent after its leader-epoch
   * fence admitted the command (the coordinator never calls a backend's Free
   * itself). Rejects with a WardenError on failure; a stale epoch with a
   * StaleLeaderEpochError, nothing done.
   */
  freeBackend(request: FreeRequest, options: { readonly signal: AbortSignal; readonly timeoutMs: number }): Promise<FreeAnswer>;
  /** Whether the agent still runs that incarnation (a local stop failed: alive → row 3, dead → row 2). */
  isRunning(incarnation: string, options: { readonly signal: AbortSignal }): Promise<boolean>;
}

/** How the loader reaches nodes. */
export interface AgentDirectory {
  /** The node's agent, or undefined when no agent is connected for it. */
  agent(nodeId: string): AgentPort | undefined;
  /** True for the coordinator's embedded agent (placement `local`). */
  isLocal(nodeId: string): boolean;
  /**
   * False while the node is unreachable or lost: its instances stay accounted
   * but calls are not routed there (they fail with UNAVAILABLE). Optional:
   * absent means always reachable.
   */
  isReachable?(nodeId: string): boolean;
  /**
   * True for a ready instance on an unreachable node whose backend still
   * answers the coordinator's own health probe (serving through an agent
   * outage): routed although its node is not reachable. Optional: absent
   * means never (an unreachable node's instances are not routed).
   */
  servesDuringOutage?(incarnation: string): boolean;
  /**
   * True when the instance was started from a backend bundle other than the
   * one its node's catalog names for `backend` now (the agent restarted with
   * a new bundle): a rollout replaces it one at a time, as for changed load
   * settings. Optional: absent means never.
   */
  bundleStale?(nodeId: string, incarnation: string, backend: string): boolean;
}

/**
 * The loader's handle on one backend process (its "local half"): the routing
 * client. Free is not here: it is a command, sent through the node's agent
 * (AgentPort.freeBackend) so the agent's leader-epoch fence judges it.
 */
export interface BackendHandle {
  /** Closes the client channel. */
  close(): void;
}

export interface BackendConnector<H extends BackendHandle = BackendHandle> {
  /** `target` says whose backend it is (a connector may dial some nodes' or backends' over TLS). */
  connect(address: string, target?: { readonly nodeId: string; readonly model: string }): H;
}

/** A stop intent in the coordinator's journal (DESIGN §3.3 step 4). */
export interface StopIntent {
  readonly incarnation: string;
  readonly nodeId: string;
  readonly model: string;
  readonly address: string;
  readonly reason: string;
}

/** The coordinator's journal, as the loader uses it. Both resolve once durable (fsync'd). */
export interface StopIntentJournal {
  recordStopIntent(intent: StopIntent): Promise<void>;
  clearStopIntent(incarnation: string): Promise<void>;
}

/** A sleep on the injected clock; rejects with the abort reason. */
export type Sleep = (ms: number, signal?: AbortSignal) => Promise<void>;
