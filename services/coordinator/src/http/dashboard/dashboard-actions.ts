import { Code, WardenError, codeName, invalidArgument } from "@warden/common";
import { UnloadOutcome, type AdminService } from "@warden/proto";
import type { CallOptions, Client } from "@warden/grpc";
import { checkId } from "../../admin/check-id.js";
import type { DashboardErrorBody } from "./dashboard-view.js";
import { dashboardInstance, dashboardReplicas } from "./dashboard-snapshot.js";
import { httpStatusWithExplicit, requestError } from "../client-errors.js";

/** The buttons' operations: each one Admin API call (LoadModel, UnloadModel, DrainNode, UndrainNode). */
export type DashboardAction =
  | { readonly t: "load"; readonly model: string; readonly nodeId: string }
  | { readonly t: "unload"; readonly model: string; readonly force: boolean }
  | { readonly t: "drain"; readonly nodeId: string; readonly force: boolean }
  | { readonly t: "undrain"; readonly nodeId: string }
  | { readonly t: "scale"; readonly model: string; readonly min?: number; readonly max?: number };

export const actionNames: readonly DashboardAction["t"][] = ["load", "unload", "drain", "undrain", "scale"];

const fieldsOf: Readonly<Record<DashboardAction["t"], readonly string[]>> = {
  load: ["model", "nodeId"],
  unload: ["model", "force"],
  drain: ["nodeId", "force"],
  undrain: ["nodeId"],
  scale: ["model", "min", "max"],
};

/** Largest action body read (the route's bodyLimit): two ids and a flag fit many times over. */
export const maxActionBodyBytes = 4096;

function idField(o: Record<string, unknown>, key: string, required: boolean): string {
  const v = o[key];
  if (v === undefined && !required) return "";
  if (typeof v !== "string") throw invalidArgument(key, required ? "is required (a string)" : "must be a string");
  if (!required && v === "") return "";
  return checkId(v, key);
}

function flag(o: Record<string, unknown>, key: string): boolean {
  const v = o[key];
  if (v === undefined) return false;
  if (typeof v !== "boolean") throw invalidArgument(key, "must be true or false");
  return v;
}

/** A replica bound: a whole number (ScaleModel checks 0..1024 and min <= max, naming the field). */
function bound(o: Record<string, unknown>, key: string): { [k: string]: number } {
  const v = o[key];
  if (v === undefined) return {};
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v > 0xffff_ffff) throw invalidArgument(key, "must be a whole number >= 0");
  return { [key]: v };
}

/**
 * Validates one action's whole body before anything runs: an unknown action
 * or field, a wrong type or a bad id is refused naming it, and nothing is called.
 */
export function parseAction(name: string, body: unknown): DashboardAction {
  if (!(actionNames as readonly string[]).includes(name)) throw new WardenError(Code.NotFound, `action: unknown dashboard action ${JSON.stringify(name.slice(0, 32))}; known: ${actionNames.join(", ")}`, { details: { field: "action" } });
  const t = name as DashboardAction["t"];
  if (typeof body !== "object" || body === null || Array.isArray(body)) throw invalidArgument("body", "must be a JSON object");
  const o = body as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!fieldsOf[t].includes(k)) throw invalidArgument(k.slice(0, 64), `is not a field of ${t} (fields: ${fieldsOf[t].join(", ")})`);
  switch (t) {
    case "load":
      return { t, model: idField(o, "model", true), nodeId: idField(o, "nodeId", false) };
    case "unload":
      return { t, model: idField(o, "model", true), force: flag(o, "force") };
    case "drain":
      return { t, nodeId: idField(o, "nodeId", true), force: flag(o, "force") };
    case "undrain":
      return { t, nodeId: idField(o, "nodeId", true) };
    case "scale":
      if (o.min === undefined && o.max === undefined) throw invalidArgument("min", "min or max is required");
      return { t, model: idField(o, "model", true), ...bound(o, "min"), ...bound(o, "max") };
  }
}

const unloadOutcomes: Readonly<Record<UnloadOutcome, string>> = {
  [UnloadOutcome.UNSPECIFIED]: "unspecified",
  [UnloadOutcome.STOPPED]: "stopped",
  [UnloadOutcome.REGISTERED_AGAIN]: "registered-again",
  [UnloadOutcome.LEFTOVER]: "leftover",
  [UnloadOutcome.NOT_LOADED]: "not-loaded",
};

/** Runs a validated action (`actorName`: who, for ScaleModel's event) through the Admin API client (in process, behind the same role check as gRPC). */
export async function runAction(actorName: string, admin: Pick<Client<typeof AdminService>, "loadModel" | "unloadModel" | "drainNode" | "undrainNode" | "scaleModel">, a: DashboardAction, opts: CallOptions): Promise<Record<string, unknown>> {
  switch (a.t) {
    case "load": {
      const r = await admin.loadModel({ model: a.model, nodeId: a.nodeId }, opts);
      return { action: a.t, ...(r.instance === undefined ? {} : { instance: dashboardInstance(r.instance) }) };
    }
    case "unload": {
      const r = await admin.unloadModel({ model: a.model, force: a.force }, opts);
      return { action: a.t, outcome: unloadOutcomes[r.outcome], error: r.error };
    }
    case "drain": {
      const r = await admin.drainNode({ nodeId: a.nodeId, force: a.force }, opts);
      return { action: a.t, nodeId: r.node?.nodeId ?? a.nodeId, drainRemaining: r.node?.drainRemaining ?? 0 };
    }
    case "undrain": {
      const r = await admin.undrainNode({ nodeId: a.nodeId }, opts);
      return { action: a.t, nodeId: r.node?.nodeId ?? a.nodeId };
    }
    case "scale": {
      const r = await admin.scaleModel({ model: a.model, ...(a.min === undefined ? {} : { min: a.min }), ...(a.max === undefined ? {} : { max: a.max }), operator: actorName }, opts);
      return { action: a.t, ...(r.replicas === undefined ? {} : { replicas: dashboardReplicas(r.replicas) }) };
    }
  }
}

/** Status and JSON body of any error a dashboard endpoint meets. */
export function errorReply(err: unknown): { readonly status: number; readonly body: DashboardErrorBody } {
  const e = requestError(err);
  const field = e.details.field;
  return { status: httpStatusWithExplicit(e, 409), body: { error: { code: codeName(e.code), message: e.rawMessage, ...(typeof field === "string" ? { field } : {}) } } };
}
