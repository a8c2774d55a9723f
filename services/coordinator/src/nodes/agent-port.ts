import { BackendState, StartFailureCode, StartStage, type AgentService, type StartBackendResponse } from "@warden/proto";
import type { Client } from "@warden/grpc";
import { Code, StaleLeaderEpochError, WardenError } from "@warden/common";
import type { PeerGrant } from "./peer-directory.js";
import type { AgentPort, FreeAnswer, FreeRequest, StartEvent, StartRequest, StopAnswer, StopRequest } from "@warden/loader";

/** The coordinator's current leader epoch; 0 = no HA, the single-machine default. */
export type LeaderEpochProvider = () => bigint;

export const noLeaderEpoch: LeaderEpochProvider = () => 0n;

/** Told of every stale-epoch refusal an agent sends (the HA runner steps down on it). */
export type StaleEpochListener = (err: StaleLeaderEpochError) => void;

/** The typed refusal, reported to `onStale` when it is one; any error returned as it came otherwise. */
export function typedRefusal(err: unknown, onStale: StaleEpochListener | undefined): unknown {
  const e = StaleLeaderEpochError.fromWire(err);
  if (e instanceof StaleLeaderEpochError) onStale?.(e);
  return e;
}

/**
 * The loader's AgentPort over an AgentService client — a gRPC client for a
 * registered agent, or an in-process client for the embedded agent. Both
 * reach the agent through the same interface (DESIGN §1 placements). Every
 * command is stamped here with `leaderEpoch()` as it is sent; an agent's
 * stale-epoch refusal comes back as a StaleLeaderEpochError (never retried
 * here: a retry from the same epoch is refused again).
 */
export function agentPort(client: Client<typeof AgentService>, leaderEpoch: LeaderEpochProvider = noLeaderEpoch, onStale?: StaleEpochListener, peersFor?: (artifacts: readonly { readonly sha256: string }[]) => PeerGrant): AgentPort {
  return {
    async *startBackend(req: StartRequest, options: { readonly signal: AbortSignal }): AsyncIterable<StartEvent> {
      // Peers to fetch each artifact from (peer-directory.ts), held until the start's stream ends.
      const grant = peersFor?.(req.artifacts ?? []);
      try {
        const stream = client.startBackend(
          { incarnation: req.incarnation, model: req.model, backend: req.backend, options: [...req.options], modelFile: req.modelFile, contextSize: req.contextSize,
            artifacts: (req.artifacts ?? []).map((a) => ({ source: a.source, sha256: a.sha256, sizeBytes: BigInt(a.sizeBytes), path: a.path, peers: grant?.peers.get(a.sha256) ?? [] })),
            backendModel: req.load.backendModel, gpuLayers: req.load.gpuLayers, threads: req.load.threads, batch: req.load.batch, mmap: req.load.mmap, flashAttention: req.load.flashAttention, cuda: req.load.cuda,
            leaderEpoch: leaderEpoch(), requestedBy: req.requestedBy ?? "", loadDigest: req.loadDigest ?? "" },
          { signal: options.signal },
        );
        yield* startEvents(stream, onStale);
      } finally {
        grant?.release();
      }
    },
    async stopBackend(req: StopRequest, options: { readonly signal: AbortSignal; readonly timeoutMs: number }): Promise<StopAnswer> {
      const r = await client.stopBackend({ address: req.address, incarnation: req.incarnation, force: req.force, reason: req.reason, leaderEpoch: leaderEpoch(), requestedBy: req.requestedBy ?? "" }, { signal: options.signal, timeoutMs: options.timeoutMs }).catch((err: unknown) => {
        throw typedRefusal(err, onStale);
      });
      switch (r.outcome.case) {
        case "stopped":
          return { t: "stopped" };
        case "alreadyGone":
          return { t: "alreadyGone", replacedBy: r.outcome.value.replacedBy };
        case undefined:
          throw new WardenError(Code.Internal, "agent answered StopBackend without an outcome");
      }
    },
    async freeBackend(req: FreeRequest, options: { readonly signal: AbortSignal; readonly timeoutMs: number }): Promise<FreeAnswer> {
      const r = await client.freeBackend({ address: req.address, incarnation: req.incarnation, leaderEpoch: leaderEpoch(), requestedBy: req.requestedBy ?? "" }, { signal: options.signal, timeoutMs: options.timeoutMs }).catch((err: unknown) => {
        throw typedRefusal(err, onStale);
      });
      switch (r.outcome.case) {
        case "freed":
          return { t: "freed" };
        case "unsupported":
          return { t: "unsupported" };
        case "alreadyGone":
          return { t: "alreadyGone" };
        case undefined:
          throw new WardenError(Code.Internal, "agent answered FreeBackend without an outcome");
      }
    },
    async isRunning(incarnation: string, options: { readonly signal: AbortSignal }): Promise<boolean> {
      const r = await client.listBackends({}, { signal: options.signal, timeoutMs: 5_000 });
      const e = r.backends.find((b) => b.incarnation === incarnation);
      return e !== undefined && e.state !== BackendState.EXITED;
    },
  };
}

/** The agent's start stream as the loader's events; a stale-epoch refusal typed. */
const startStages: Partial<Record<StartStage, Extract<StartEvent, { t: "stage" }>["stage"]>> = {
  [StartStage.RESOLVING]: "resolving",
  [StartStage.PULLING]: "pulling",
  [StartStage.UNPACKING]: "unpacking",
  [StartStage.INSTALLED]: "installed",
};

async function* startEvents(stream: AsyncIterable<StartBackendResponse>, onStale: StaleEpochListener | undefined): AsyncIterable<StartEvent> {
  try {
    for await (const r of stream) {
      const ev = r.event;
      switch (ev.case) {
        case "spawned": {
          const gpu = ev.value.gpuDevice === "" ? undefined : Number(ev.value.gpuDevice);
          const floor = ev.value.heartbeatSequence > 0n ? { reportFloor: { bootEpoch: ev.value.bootEpoch, sequence: ev.value.heartbeatSequence } } : {};
          yield { t: "spawned", address: ev.value.address, pid: ev.value.pid, gpu: gpu !== undefined && Number.isInteger(gpu) ? gpu : undefined, ...floor };
          break;
        }
        case "loading":
          yield { t: "loading" };
          break;
        case "pulling":
          yield { t: "pulling", sha256: ev.value.sha256, doneBytes: Number(ev.value.doneBytes), totalBytes: Number(ev.value.totalBytes), verified: ev.value.verified };
          break;
        case "stage": {
          // A stage this coordinator does not know (a newer agent's) is skipped, as an unknown event case is.
          const stage = startStages[ev.value.stage];
          if (stage !== undefined) yield { t: "stage", stage };
          break;
        }
        case "ready":
          yield { t: "ready", address: ev.value.address, memoryBytes: Number(ev.value.memoryBytes) };
          break;
        case "failed":
          yield { t: "failed", code: StartFailureCode[ev.value.code], message: ev.value.message, exitCode: ev.value.exitCode, lastStderrLine: ev.value.lastStderrLine };
          break;
        case undefined:
          break;
      }
    }
  } catch (err) {
    throw typedRefusal(err, onStale);
  }
}
