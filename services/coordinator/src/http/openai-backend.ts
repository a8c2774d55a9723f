import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, WardenError } from "@warden/common";
import type { Lease } from "@warden/loader";
import type { EmbeddingResult, GenerateImageRequestSchema, PredictOptionsSchema, Reply, Result, TTSRequestSchema, TranscriptRequestSchema, TranscriptResult } from "@warden/proto";
import type { BackendClientHandle } from "../routing/backend-connector.js";
import { modelIdentity } from "../routing/model-identity.js";
import type { CallerClass } from "../routing/admission-gate.js";
import { RoutedCalls, outcomeTracker, type CallRouteHint } from "../routing/routed-call.js";
import type { CoordinatorHttpContext } from "./coordinator-http.js";

type PredictInit = MessageInitShape<typeof PredictOptionsSchema>;

/**
 * The backend.Backend calls the OpenAI API makes, routed exactly as the gRPC
 * services route (routed-call.ts): load on demand, a lease per attempt
 * completed in `finally`, one retry on a fresh instance when the first is
 * gone or stale, ModelIdentity set to the instance's identity, the caller's
 * signal (client disconnect, http.callTimeout) cancelling the backend call.
 */
export class OpenAiBackend {
  private readonly calls: RoutedCalls;
  private readonly track: <T>(p: Promise<T>) => Promise<T>;

  constructor(private readonly ctx: CoordinatorHttpContext) {
    this.calls = new RoutedCalls(ctx.loader, ctx.log, ctx.gate, ctx.callObserver);
    this.track = outcomeTracker(ctx.routed);
  }

  /** Unknown models are 404 before anything is routed (the loader would say the same, later). */
  checkConfigured(model: string): void {
    if (this.ctx.loader.modelSpec(model) === undefined) throw new WardenError(Code.NotFound, `model: ${JSON.stringify(model.slice(0, 256))} is not configured (GET /v1/models lists the models)`, { details: { field: "model" } });
  }

  private identity(model: string): string {
    return modelIdentity(this.ctx.loader, model);
  }

  /** Calls that pass files by path (TTS dst, transcription, images) reach only backends on this machine. */
  private checkLocal(lease: Lease<BackendClientHandle>, what: string): void {
    if (lease.nodeId === this.ctx.localNodeId) return;
    throw new WardenError(Code.FailedPrecondition, `${what} passes files by path, and model "${lease.model}" runs on node "${lease.nodeId}", not on the coordinator's machine (the embedded agent)`);
  }

  /** Chat and completions under `routing: prefix`: the prompt as the backend receives it decides the replica (prefix-routing.ts). */
  private prefixHint(model: string, opts: PredictInit): CallRouteHint | undefined {
    return this.ctx.prefixRouting?.hint(model, () => opts);
  }

  predict(model: string, opts: PredictInit, signal: AbortSignal, caller?: CallerClass): Promise<Reply> {
    return this.track(this.calls.unary(model, signal, (lease) => lease.backend.client.predict({ ...opts, ModelIdentity: this.identity(model) }, { signal }), () => true, this.prefixHint(model, opts), caller));
  }

  predictStream(model: string, opts: PredictInit, signal: AbortSignal, caller?: CallerClass): AsyncGenerator<Reply> {
    return this.calls.stream(model, signal, (lease) => lease.backend.client.predictStream({ ...opts, ModelIdentity: this.identity(model) }, { signal }), () => true, this.ctx.routed, undefined, this.prefixHint(model, opts), caller);
  }

  embedding(model: string, opts: PredictInit, signal: AbortSignal, caller?: CallerClass): Promise<EmbeddingResult> {
    return this.track(this.calls.unary(model, signal, (lease) => lease.backend.client.embedding({ ...opts, ModelIdentity: this.identity(model) }, { signal }), () => true, undefined, caller));
  }

  ttsStream(model: string, req: MessageInitShape<typeof TTSRequestSchema>, signal: AbortSignal): AsyncGenerator<Reply> {
    return this.calls.stream(model, signal, (lease) => lease.backend.client.tTSStream({ ...req, ModelIdentity: this.identity(model) }, { signal }), () => true, this.ctx.routed);
  }

  tts(model: string, req: MessageInitShape<typeof TTSRequestSchema>, signal: AbortSignal): Promise<Result> {
    return this.track(
      this.calls.unary(
        model,
        signal,
        (lease) => {
          this.checkLocal(lease, "TTS (the backend has no TTSStream)");
          return lease.backend.client.tTS({ ...req, ModelIdentity: this.identity(model) }, { signal });
        },
        () => true,
      ),
    );
  }

  transcribe(model: string, req: MessageInitShape<typeof TranscriptRequestSchema>, signal: AbortSignal): Promise<TranscriptResult> {
    return this.track(
      this.calls.unary(
        model,
        signal,
        (lease) => {
          this.checkLocal(lease, "AudioTranscription");
          return lease.backend.client.audioTranscription({ ...req, ModelIdentity: this.identity(model) }, { signal });
        },
        () => true,
      ),
    );
  }

  generateImage(model: string, req: MessageInitShape<typeof GenerateImageRequestSchema>, signal: AbortSignal): Promise<Result> {
    return this.track(
      this.calls.unary(
        model,
        signal,
        (lease) => {
          this.checkLocal(lease, "GenerateImage");
          return lease.backend.client.generateImage({ ...req, ModelIdentity: this.identity(model) }, { signal });
        },
        () => true,
      ),
    );
  }
}
