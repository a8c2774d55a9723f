import { callClass, type AdmissionSettings, type PriorityClass } from "@warden/admission";
import type { HandlerContext } from "@warden/grpc";
import type { Loader } from "@warden/loader";
import type { Authenticator } from "../auth/authenticator.js";
import type { Principal } from "../auth/token-table.js";
import { AdmissionGate, defaultCaller, type CallerClass, type RoutingAdmission } from "./admission-gate.js";
import type { BackendClientHandle } from "./backend-connector.js";

/** gRPC metadata a call may set to run at a lower class than its token's (or, auth off, any class). */
export const priorityMetadataKey = "warden-priority";
/** The HTTP header for the same (the OpenAI routes). */
export const priorityHeader = "x-warden-priority";

/**
 * The class and fair-share principal of one call. With auth on, a token's
 * `priority=` is its calls' class and the highest they may ask for (unset:
 * standard); each token is its own principal. With auth off there is no
 * principal to trust: every call shares "anonymous" and may ask for any
 * class (a deployment that needs classes enforced turns auth on).
 */
export function callerClass(principal: Principal | undefined, authOn: boolean, asked: string | undefined, field: string): CallerClass {
  if (!authOn) return asked === undefined || asked === "" ? defaultCaller : { cls: callClass("critical", asked, field), principal: "anonymous" };
  const allowed: PriorityClass = principal?.priority ?? "standard";
  return { cls: callClass(allowed, asked, field), principal: principal?.name ?? "anonymous" };
}

/** The class a gRPC call asked for (its first `warden-priority` value). */
export function askedPriority(ctx: HandlerContext): string | undefined {
  // Per routed call: the lean server's direct read when it offers one (no Metadata built).
  if (ctx.firstMetadataValue !== undefined) return ctx.firstMetadataValue(priorityMetadataKey);
  const v = ctx.metadata.get(priorityMetadataKey)[0];
  return typeof v === "string" ? v : undefined;
}

/**
 * The gate of a coordinator and how its gRPC routes read a call's class:
 * settings read through `settingsOf` on every call (a config reload applies
 * at the next call), capacity from the model's ready and loading replicas.
 */
export function routingAdmission(o: { readonly settingsOf: (model: string) => AdmissionSettings | undefined; readonly loader: Loader<BackendClientHandle>; readonly authn: Authenticator | undefined }): RoutingAdmission {
  const gate = new AdmissionGate({
    settingsOf: o.settingsOf,
    replicasOf: (model) => {
      const st = o.loader.replicaStatus(model);
      return st === undefined ? 0 : st.ready + st.loading;
    },
  });
  const authn = o.authn;
  return { gate, callerOf: (ctx) => callerClass(authn?.principalOf(ctx), authn !== undefined, askedPriority(ctx), priorityMetadataKey) };
}
