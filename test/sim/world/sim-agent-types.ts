import type { WardenError } from "@warden/common";
import type { StartEvent, StopAnswer } from "@warden/loader";
import type { TruthProcess } from "./ground-truth.js";

export type RecordState = "loading" | "ready" | "stopping" | "exited";

/** The agent's record of one incarnation (shared by the agent and its stop and inventory parts). */
export interface AgentRecord {
  readonly incarnation: string;
  readonly model: string;
  readonly backend: string;
  /** The start's load digest, reported in the inventory (a restarted coordinator rolls out a stale instance). */
  readonly loadDigest: string;
  readonly process: TruthProcess;
  state: RecordState;
  stopRequested: { readonly reason: string; readonly atMs: number } | undefined;
  stopping: Promise<StopAnswer> | undefined;
}

/** What an agent sends the coordinator when it (re)starts. */
export interface Registration {
  readonly nodeId: string;
  readonly address: string;
  readonly labels: Record<string, string>;
  readonly bootEpoch: bigint;
  readonly embedded: boolean;
  readonly backends: readonly string[];
  /** The agent config's placement limits; absent when the config sets none. */
  readonly limits?: { readonly maxReplicasPerModel: number };
}

/** A start stream's sink on the agent side (delivered to the coordinator over the network). */
export interface StartSink {
  emit(ev: StartEvent): void;
  end(): void;
  /** The call fails with this error (a stale-leader-epoch refusal), no event sent. */
  fail(err: WardenError): void;
}
