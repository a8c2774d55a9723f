import { Code, WardenError } from "@warden/common";
import { Backend } from "@warden/proto";
import type { HandlerContext, ServiceImpl } from "./types.js";
import { withUnimplemented } from "./unimplemented.js";

/**
 * A Backend for the transport tests (lean client, lean server): echoes,
 * scripted failures by prompt or model name, and a record of what the
 * handlers saw so a test can check the server side of a cancel or deadline.
 */
export interface EchoBackendSeen {
  predictAbort: unknown;
  /** The deadline the last Predict's handler saw (undefined: none). */
  predictDeadlineAtMs: number | undefined;
  streamAbort: unknown;
  header: string;
  peer: string;
}

export function newEchoBackendSeen(): EchoBackendSeen {
  return { predictAbort: undefined, predictDeadlineAtMs: undefined, streamAbort: undefined, header: "", peer: "" };
}

/** The NotFound message for model "missing": percent sign and non-ASCII exercise grpc-message encoding. */
export const missingModelMessage = `model "missing" not found: 100% gone ✓`;

export const decodeText = (b: Uint8Array): string => new TextDecoder().decode(b);

export function waitForAbort(ctx: HandlerContext): Promise<void> {
  return new Promise((resolve) => {
    if (ctx.signal.aborted) resolve();
    ctx.signal.addEventListener("abort", () => { resolve(); }, { once: true });
  });
}

/**
 * Prompts: "hang" waits for the call's signal; "big" answers 200 KiB;
 * otherwise `echo:<Prompt>:<ModelIdentity>`. Streams yield `Tokens` replies;
 * "endless" then waits for the signal, "fail" then fails with ABORTED.
 * LoadModel: "missing" → NOT_FOUND with details, "boom" → a plain Error.
 */
export function echoBackend(seen: EchoBackendSeen): ServiceImpl<typeof Backend> {
  return withUnimplemented(Backend, {
    async health(_req, ctx) {
      seen.header = String(ctx.metadata.get("x-test")[0] ?? "");
      seen.peer = ctx.peer;
      ctx.responseHeader.set("x-echo", seen.header);
      ctx.responseTrailer.set("x-trailer", "t1");
      return { message: new TextEncoder().encode("OK") };
    },
    async loadModel(req) {
      if (req.Model === "missing") throw new WardenError(Code.NotFound, missingModelMessage, { details: { field: "Model" } });
      if (req.Model === "boom") throw new Error("secret internals");
      return { success: true, message: `loaded ${req.Model}` };
    },
    async predict(req, ctx) {
      seen.predictDeadlineAtMs = ctx.deadlineAtMs;
      if (req.Prompt === "hang") {
        await waitForAbort(ctx);
        seen.predictAbort = ctx.signal.reason;
        throw WardenError.from(ctx.signal.reason);
      }
      if (req.Prompt === "big") return { message: new Uint8Array(200 * 1024) };
      return { message: new TextEncoder().encode(`echo:${req.Prompt}:${req.ModelIdentity}`), tokens: req.Prompt.length };
    },
    async *predictStream(req, ctx) {
      for (let i = 0; i < req.Tokens; i++) yield { message: new TextEncoder().encode(`t${String(i)}`) };
      if (req.Prompt === "endless") {
        await waitForAbort(ctx);
        seen.streamAbort = ctx.signal.reason;
      }
      if (req.Prompt === "fail") throw new WardenError(Code.Aborted, "stopped mid-stream");
    },
    async free() {
      throw new WardenError(Code.Unimplemented, "Free is not implemented");
    },
    async status() {
      return {};
    },
  });
}
