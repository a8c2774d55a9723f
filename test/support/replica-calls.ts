/**
 * Helpers of the replica real-process tests (test/replicas*.test.ts): calls
 * held open as long as a test needs them (a PredictStream of a backend-sim
 * whose every token is slow, cut by the test's abort — never by a timer), and
 * compact views of a model's replicas from ListModels.
 */
import type { Client } from "@warden/grpc";
import { type AdminService, type InferenceService, InstanceState, type ModelInstance, type ModelReplicas } from "@warden/proto";
import { simModel } from "./coordinator-harness.js";

/** backend-sim sleeps this long before each streamed token: a held stream lasts hours, a one-token Predict a moment. */
export const tokenDelayMs = 200;

/** A backend-sim model with replica settings (and optionally spread / idleTimeout). */
export function replicaModel(id: string, replicas: Record<string, unknown>, o: { spread?: "node" | "gpu" | "any"; idleTimeout?: string } = {}): Record<string, unknown> {
  return { ...simModel(id, { knobs: { predict_delay_ms: tokenDelayMs } }), replicas, ...o };
}

/** Calls in flight until `release`. */
export interface HeldCalls {
  /** Ends every held call (the client cancels; the coordinator's lease and the backend's sleep end with it). */
  release(): Promise<void>;
}

/**
 * Starts `n` PredictStream calls of `model` that stay in flight until
 * released. They start one after another, each once the coordinator counts
 * the previous one in flight, so routing sees each arrival separately.
 */
export async function holdCalls(inference: Client<typeof InferenceService>, admin: Client<typeof AdminService>, model: string, n: number, timeoutMs = 60_000): Promise<HeldCalls> {
  const ctl = new AbortController();
  const done: Promise<unknown>[] = [];
  const base = inFlightOf(await instancesOf(admin, model));
  for (let i = 0; i < n; i++) {
    done.push(
      (async () => {
        for await (const _ of inference.predictStream({ model, options: { Prompt: `held ${String(i)}`, Tokens: 100_000 } }, { signal: ctl.signal })) {
          // tokens keep coming until the abort
        }
      })().catch((e: unknown) => (ctl.signal.aborted ? undefined : e)),
    );
    const end = Date.now() + timeoutMs;
    while (inFlightOf(await instancesOf(admin, model)) < base + i + 1) {
      const early = await Promise.race([done[i], new Promise((r) => setTimeout(r, 50, "pending"))]);
      if (early !== "pending") throw new Error(`held call ${String(i)} of ${model} ended early: ${String(early)}`);
      if (Date.now() > end) throw new Error(`held call ${String(i)} of ${model} not in flight within ${String(timeoutMs)} ms`);
    }
  }
  return {
    async release() {
      ctl.abort();
      const errors = (await Promise.all(done)).filter((e) => e !== undefined);
      if (errors.length > 0) throw new Error(`held calls failed: ${errors.map(String).join("; ")}`);
    },
  };
}

/** The model's instances in ListModels (every state), by node then incarnation. */
export async function instancesOf(admin: Client<typeof AdminService>, model: string): Promise<ModelInstance[]> {
  return (await admin.listModels({})).instances.filter((i) => i.model === model).sort((a, b) => a.nodeId.localeCompare(b.nodeId) || a.incarnation.localeCompare(b.incarnation));
}

/** Ready instances of the model (not pending eviction). */
export async function readyOf(admin: Client<typeof AdminService>, model: string): Promise<ModelInstance[]> {
  return (await instancesOf(admin, model)).filter((i) => i.state === InstanceState.READY && !i.pendingEviction);
}

export function inFlightOf(rows: readonly ModelInstance[]): number {
  return rows.reduce((n, r) => n + r.inFlight, 0);
}

/** The model's replica summary in ListModels. */
export async function summaryOf(admin: Client<typeof AdminService>, model: string): Promise<ModelReplicas> {
  const s = (await admin.listModels({})).replicas.find((r) => r.model === model);
  if (s === undefined) throw new Error(`no replica summary for ${model}`);
  return s;
}
