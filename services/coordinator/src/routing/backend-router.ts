import type { DescMethod } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { Code, WardenError, invalidArgument, type Logger } from "@warden/common";
import type { HandlerContext, RawServerStreamHandler, RawServiceHandlers, RawStreamHandler, RawUnaryHandler } from "@warden/grpc";
import type { Lease, Loader } from "@warden/loader";
import type { BackendClientHandle } from "./backend-connector.js";
import { backendMethodTable, readIdentity, withIdentity, type BackendMethodRow } from "./backend-identity.js";
import { backendPathPlans, scanRequest } from "../auth/backend-path-check.js";
import { modelIdentity } from "./model-identity.js";
import { PathCheckedRequests } from "../auth/path-checked-requests.js";
import { ReplayableRequests } from "./replayable-requests.js";
import { RoutedCalls, outcomeTracker, type CallBytes, type CallRouteHint, type RoutedCallObserver, type RoutedCounter } from "./routed-call.js";
import { prefixPromptChars, type PrefixRouting } from "./prefix-routing.js";
import { promptOfOptions } from "./prompt-bytes.js";
import type { RoutingAdmission } from "./admission-gate.js";

/** The request metadata key naming the Warden model a `backend.Backend` call is for. */
export const modelMetadataKey = "warden-model";
export const maxModelChars = 256;

/** The identity a routed request carries to its backend: the name the instance was loaded as (its backendModel, else the model id). */
export function backendIdentityOf(loader: Loader<BackendClientHandle>, lease: Lease<BackendClientHandle>): string {
  return modelIdentity(loader, lease.model);
}

/** `Reply { message: "OK" }`: the data plane's own Health answer, as a backend gives it. */
const healthReply = new BinaryWriter().tag(1, WireType.LengthDelimited).bytes(new TextEncoder().encode("OK")).finish();

/** Methods Warden answers itself: it manages loading, so a client's lifecycle calls never reach a managed backend. */
const managed: Readonly<Record<string, string>> = {
  LoadModel: "Warden manages loading: LoadModel is not forwarded to managed backends; name the model in the warden-model metadata of any call and it is loaded on demand (or `warden models load`)",
  Free: "Warden manages unloading: Free is not forwarded to managed backends; use `warden models unload`",
};

/**
 * The Warden model a call names: the `warden-model` metadata, else the
 * request's ModelIdentity field where its message has one. Both present
 * and different is ambiguous and refused (validated before anything is routed).
 */
function modelOf(ctx: HandlerContext, row: BackendMethodRow, fromField: string): string {
  const values = ctx.metadata.get(modelMetadataKey);
  if (values.length > 1) throw invalidArgument(modelMetadataKey, "given more than once");
  const fromMetadata = values.length === 1 ? String(values[0]) : "";
  if (fromMetadata !== "" && fromField !== "" && fromMetadata !== fromField) {
    throw invalidArgument(modelMetadataKey, `names model "${fromMetadata.slice(0, maxModelChars)}" but ${row.method.input.name}.ModelIdentity names "${fromField.slice(0, maxModelChars)}"`);
  }
  const model = fromMetadata !== "" ? fromMetadata : fromField;
  if (model === "") {
    const where = row.identityField === undefined ? `request metadata ${modelMetadataKey}` : `request metadata ${modelMetadataKey} or ${row.method.input.name}.ModelIdentity`;
    throw invalidArgument(modelMetadataKey, `is required: name the model in ${where}`);
  }
  if (model.length > maxModelChars) throw invalidArgument(modelMetadataKey, `longer than ${String(maxModelChars)} characters`);
  return model;
}

function callOptions(ctx: HandlerContext): { signal: AbortSignal; deadlineAtMs?: number } {
  return ctx.deadlineAtMs === undefined ? { signal: ctx.signal } : { signal: ctx.signal, deadlineAtMs: ctx.deadlineAtMs };
}

function rowOf(m: DescMethod): BackendMethodRow {
  const row = backendMethodTable.get(m.name);
  if (row === undefined || row.method !== m) throw new WardenError(Code.Internal, `backend router: ${m.parent.typeName}.${m.name} is not a backend.Backend method`);
  return row;
}

/** The request as its backend gets it: with the instance's identity written at the message's own field. */
function forBackend(loader: Loader<BackendClientHandle>, row: BackendMethodRow, request: Uint8Array, lease: Lease<BackendClientHandle>): Uint8Array {
  return row.identityField === undefined ? request : withIdentity(request, row.identityField, backendIdentityOf(loader, lease));
}

/**
 * Reads a request once: the identity it names and, under `plan`, the first
 * field that names a file on the node (backend-path-rules.ts). Methods
 * without such fields (Predict's only one is PromptCachePath, read in the
 * same pass) pay nothing more than the identity read they always paid.
 */
function readRequest(row: BackendMethodRow, request: Uint8Array, checkPaths: boolean): { identity: string; refusal: WardenError | undefined } {
  const plan = checkPaths ? backendPathPlans.get(row.method.name) : undefined;
  if (plan !== undefined) return scanRequest(request, row.method.input, row.identityField, plan);
  return { identity: row.identityField === undefined ? "" : readIdentity(request, row.identityField, row.method.input), refusal: undefined };
}

/** Predict and PredictStream under `routing: prefix`: the request's prompt decides the replica (prefix-routing.ts), read bounded from the bytes. */
function prefixHint(prefix: PrefixRouting | undefined, model: string, m: DescMethod, request: Uint8Array): CallRouteHint | undefined {
  if (prefix === undefined || (m.name !== "Predict" && m.name !== "PredictStream")) return undefined;
  return prefix.hint(model, () => promptOfOptions(request, prefixPromptChars));
}

/** Whether the pass-through lets callers name files on the node: `refuse` wherever callers authenticate. */
export type NodePathPolicy = "refuse" | "pass";

/**
 * `backend.Backend` on the data plane: a LocalAI client talks to the
 * coordinator as to one backend. Every method is routed as pass-through
 * bytes (only the identity field is read and appended), with load on demand,
 * in-flight tracking from the lease to the last reply, the caller's deadline
 * and cancel, and one retry on a fresh instance when the first is gone or
 * stale (routed-call.ts). Health is answered here (the data plane is up);
 * LoadModel and Free are refused FAILED_PRECONDITION (Warden manages the
 * lifecycle); everything else, Status included, goes to the model's backend,
 * whose UNIMPLEMENTED comes back as it is. Under `nodePaths: "refuse"`,
 * a request that names a file on the node (backend-path-rules.ts) is
 * PERMISSION_DENIED naming the field, after authorization and before any
 * lease: nothing reaches a backend.
 */
export function backendRouter(
  loader: Loader<BackendClientHandle>,
  log: Logger,
  routed: RoutedCounter = { inc() {} },
  /** May the call's caller use this model (inference tokens, per model)? Throws to refuse; runs before any lease. */
  authorize: (model: string, ctx: HandlerContext, method: DescMethod) => void = () => undefined,
  nodePaths: NodePathPolicy = "refuse",
  /** Prefix-affinity routing for models configured `routing: prefix`; undefined = least in flight for all. */
  prefix?: PrefixRouting,
  /** Per-model admission (models with `admission:`); undefined = none. */
  admission?: RoutingAdmission,
  /** Told of every call when it ends, with its bytes (the workload trace). */
  observer?: RoutedCallObserver,
): RawServiceHandlers {
  const checkPaths = nodePaths === "refuse";
  const calls = new RoutedCalls(loader, log, admission?.gate, observer);

  const track = outcomeTracker(routed);

  return {
    unary(m): RawUnaryHandler {
      if (m.name === "Health") return () => Promise.resolve(healthReply);
      const refusal = managed[m.name];
      if (refusal !== undefined) return () => Promise.reject(new WardenError(Code.FailedPrecondition, refusal));
      const row = rowOf(m);
      return async (request, ctx) => {
        const read = readRequest(row, request, checkPaths);
        const model = modelOf(ctx, row, read.identity);
        authorize(model, ctx, m);
        if (read.refusal !== undefined) throw read.refusal;
        const size: CallBytes = { reqBytes: request.length };
        return track(
          calls.unary(
            model,
            ctx.signal,
            async (lease) => {
              const reply = await lease.backend.client.unaryBytes(m, forBackend(loader, row, request, lease), callOptions(ctx));
              size.respBytes = reply.length;
              return reply;
            },
            () => true,
            prefixHint(prefix, model, m, request),
            admission?.callerOf(ctx),
            size,
          ),
        );
      };
    },
    serverStream(m): RawServerStreamHandler {
      const row = rowOf(m);
      // Generators, so a refused request fails the iteration, never the handler's call.
      return async function* (request, ctx) {
        const read = readRequest(row, request, checkPaths);
        const model = modelOf(ctx, row, read.identity);
        authorize(model, ctx, m);
        if (read.refusal !== undefined) throw read.refusal;
        const size: CallBytes = { reqBytes: request.length, respBytes: 0 };
        for await (const reply of calls.stream(model, ctx.signal, (lease) => lease.backend.client.streamBytes(m, forBackend(loader, row, request, lease), callOptions(ctx)), () => true, routed, undefined, prefixHint(prefix, model, m, request), admission?.callerOf(ctx), size)) {
          size.respBytes = (size.respBytes ?? 0) + reply.length;
          yield reply;
        }
      };
    },
    stream(m): RawStreamHandler {
      const row = rowOf(m);
      const plan = checkPaths ? backendPathPlans.get(m.name) : undefined;
      return async function* (requests, ctx) {
        // Streaming requests carry no identity field: the model is named in the metadata.
        const model = modelOf(ctx, row, "");
        authorize(model, ctx, m);
        const checked = plan === undefined ? undefined : new PathCheckedRequests(m.input, plan, ctx.signal);
        const replay = new ReplayableRequests(checked === undefined ? requests : await checked.open(requests));
        const signal = checked?.signal ?? ctx.signal;
        const options = ctx.deadlineAtMs === undefined ? { signal } : { signal, deadlineAtMs: ctx.deadlineAtMs };
        // The requests' bytes are not counted (they may be replayed to a second instance): replies only.
        const size: CallBytes = { respBytes: 0 };
        try {
          for await (const reply of calls.stream(
            model,
            signal,
            (lease) => lease.backend.client.streamBytes(m, replay.attempt(), options),
            () => replay.canReplay(),
            routed,
            () => {
              replay.commit();
            },
            undefined,
            admission?.callerOf(ctx),
            size,
          )) {
            size.respBytes = (size.respBytes ?? 0) + reply.length;
            yield reply;
          }
        } catch (err) {
          throw checked?.refusal ?? err;
        }
        if (checked?.refusal !== undefined) throw checked.refusal;
      };
    },
  };
}
