/**
 * `warden models scale` and `warden nodes limits`. Loaded on
 * demand by program.ts, like admin-actions.ts.
 */
import { userInfo } from "node:os";
import { toJson, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { AdminService, NodeSchema, ScaleModelResponseSchema, type NodeLimitsSchema } from "@warden/proto";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { bearerMetadata, type Client } from "@warden/grpc";
import { cliClient } from "./cli-client.js";
import { invalidArgument, parseMemoryBudget } from "@warden/common";
import { cliTransport } from "./cli-tls.js";
import { nodeLimitsTable, scaleText } from "./render-replicas.js";
import type { ActionContext, GlobalOpts } from "./action-context.js";

function json<T extends DescMessage>(schema: T, msg: MessageShape<T>): string {
  return JSON.stringify(toJson(schema, msg, { alwaysEmitImplicit: false }), null, 2);
}

const admin = (g: GlobalOpts): Client<typeof AdminService> => cliClient(AdminService, g, { ...cliTransport(g), ...(g.authToken === undefined ? {} : { headers: bearerMetadata(g.authToken) }) });

/** A non-negative integer flag; the coordinator checks the bounds. */
function count(v: string | undefined, flag: string, min: number): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d{1,7}$/.test(v) || Number(v) < min) throw invalidArgument(flag, `must be an integer >= ${String(min)}, got "${v.slice(0, 32)}"`);
  return Number(v);
}

function defaultOperator(): string {
  try {
    return userInfo().username;
  } catch {
    return "";
  }
}

export async function modelsScale(c: ActionContext, g: GlobalOpts, model: string, o: { min?: string; max?: string; operator?: string }): Promise<number | undefined> {
  const min = count(o.min, "--min", 0);
  const max = count(o.max, "--max", 1);
  if (min === undefined && max === undefined) throw invalidArgument("--min", "give --min, --max or both");
  const r = await admin(g).scaleModel({ model, ...(min === undefined ? {} : { min }), ...(max === undefined ? {} : { max }), operator: o.operator ?? defaultOperator() }, { timeoutMs: c.deadline(g) });
  c.print(g.json ? json(ScaleModelResponseSchema, r) : r.replicas === undefined ? `${model}: scaled` : scaleText(r.replicas));
  return undefined;
}

export async function nodesLimits(c: ActionContext, g: GlobalOpts, node: string, o: { maxReplicasPerModel?: string; memoryBudget?: string; clear: boolean; operator?: string }): Promise<number | undefined> {
  const max = count(o.maxReplicasPerModel, "--max-replicas-per-model", 1);
  const budget = o.memoryBudget === undefined ? undefined : parseMemoryBudget(o.memoryBudget, "--memory-budget");
  const setting = max !== undefined || budget !== undefined;
  if (o.clear && setting) throw invalidArgument("--clear", "clears the whole override: not with --max-replicas-per-model or --memory-budget");
  const a = admin(g);
  if (!o.clear && !setting) {
    // No change asked: show the node's limits.
    const r = await a.getNode({ nodeId: node }, { timeoutMs: c.deadline(g) });
    c.print(g.json && r.node !== undefined ? json(NodeSchema, r.node) : r.node === undefined ? "" : nodeLimitsTable(r.node));
    return undefined;
  }
  const limits: MessageInitShape<typeof NodeLimitsSchema> = {
    ...(max === undefined ? {} : { maxReplicasPerModel: max }),
    ...(budget === undefined ? {} : { memoryBudget: budget.t === "bytes" ? { case: "memoryBudgetBytes", value: BigInt(budget.bytes) } : { case: "memoryBudgetPercent", value: budget.percent } }),
  };
  const r = await a.setNodeLimits({ nodeId: node, clear: o.clear, ...(o.clear ? {} : { limits }), operator: o.operator ?? defaultOperator() }, { timeoutMs: c.deadline(g) });
  c.print(g.json && r.node !== undefined ? json(NodeSchema, r.node) : r.node === undefined ? "" : `${node}: ${o.clear ? "override cleared" : "override set"}\n${nodeLimitsTable(r.node)}`);
  return undefined;
}
