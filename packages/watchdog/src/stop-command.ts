import { Code, WardenError } from "@warden/common";

/**
 * Why an instance is being stopped. The first eight are DESIGN §4's
 * `eviction.started` reasons; `health` is the explicit health-failure path and
 * `retry` the reconciler retrying the stop of a `freed` instance; `scale-down`
 * a replica above its model's min stopped for idleness.
 */
export type EvictionReason = "group" | "lru" | "idle" | "busy" | "memory" | "admin" | "drain" | "config" | "health" | "retry" | "scale-down" | "rollout";

/** Registered states an instance can be detached from. */
export type DetachedState = "loading" | "ready" | "freed";

/**
 * A stop the caller must send (DESIGN §3.2 step 3). It names the instance
 * `(node, address, incarnation)`, never just the model (LocalAI W1).
 */
export interface StopCommand {
  readonly nodeId: string;
  readonly address: string;
  readonly incarnation: string;
  readonly model: string;
  /** Skip the graceful busy wait and `Free()`. True for busy victims of policy paths and for the busy-killer. */
  readonly force: boolean;
  readonly reason: EvictionReason;
  /** The instance had requests in flight when it was selected. */
  readonly wasBusy: boolean;
  /** The state it was detached from: a `loading` victim meets the loader's lifecycle lock. */
  readonly detachedFrom: DetachedState;
  /** Request ids open at selection, for `eviction.started`. */
  readonly openRequestIds: readonly number[];
  /** The model whose load triggered the eviction, if any. */
  readonly trigger: string | undefined;
  /** Clock time of selection. */
  readonly atMs: number;
}

/**
 * What a stop came to. `stopped` / `alreadyGone` → settle row 2. `failed`
 * → row 3 or 4. `freed` records that the loader's `Free()` had succeeded
 * before the failure, so a row-3 settle registers the instance as `freed`.
 */
export type StopOutcome =
  | { readonly t: "stopped" }
  | { readonly t: "alreadyGone" }
  | {
      readonly t: "failed";
      readonly message: string;
      /** gRPC-aligned code of the failure, when known. */
      readonly code?: Code;
      readonly freed: boolean;
      /** INVALID_ARGUMENT / PERMISSION_DENIED: the request itself was wrong; log as a bug (DESIGN §3.2). */
      readonly bug?: boolean;
    };

const bugCodes: ReadonlySet<Code> = new Set([Code.InvalidArgument, Code.PermissionDenied]);

/**
 * Maps anything a stop threw to an outcome (DESIGN §3.2 outcome mapping).
 * NOT_FOUND means the instance is already gone (row 2); every other error,
 * DEADLINE_EXCEEDED and UNAVAILABLE included, is a failure with an unknown
 * outcome — never treated as success.
 */
export function stopOutcomeFromError(err: unknown, freed = false): StopOutcome {
  const e = WardenError.from(err);
  if (e.code === Code.NotFound) return { t: "alreadyGone" };
  return { t: "failed", message: e.rawMessage, code: e.code, freed, bug: bugCodes.has(e.code) };
}
