import { createHash } from "node:crypto";
import { appendFileSync, readFileSync, writeFileSync } from "node:fs";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, WardenError, invalidArgument, sleep, systemClock, type Clock } from "@warden/common";
import { StatusResponse_State, Backend, type ReplySchema } from "@warden/proto";
import { withUnimplemented, type ServiceImpl } from "@warden/grpc";
import { parseSimOptions, type SimKnobs } from "./sim-knobs.js";
import { simModalities } from "./sim-modalities.js";
import { simAnswer } from "./sim-chat.js";
import { simGenerateImage } from "./sim-image.js";
import { SimSlots } from "./sim-slots.js";
import { SimPrefixCache, simContinuation, simPromptText } from "./sim-prefix-cache.js";
import type { PredictOptions } from "@warden/proto";

/** Side effects the simulator cannot do itself; main.ts wires them to the real process. */
export interface BackendSimHooks {
  /** Ends the process: writes one line to stderr naming `reason`, then exits with `code`. */
  exit(code: number, reason: string): void;
  /** Turns ignoring SIGTERM on or off (knob `ignore_sigterm` from LoadModel options). */
  setIgnoreSigterm(ignore: boolean): void;
}

export interface BackendSimOptions {
  /** Knobs from the environment; LoadModel options override them. */
  knobs: SimKnobs;
  hooks: BackendSimHooks;
  /** @default systemClock */
  clock?: Clock;
}

/** The simulator's observable state (for Status, logs and in-process tests). */
export interface BackendSimState {
  /** Model held since a successful LoadModel; undefined before it and after Free. */
  readonly model: string | undefined;
  readonly knobs: Readonly<SimKnobs>;
  readonly inFlight: number;
  readonly predictCount: number;
  readonly allocatedBytes: number;
  readonly freeCalls: number;
}

export interface BackendSim {
  readonly impl: ServiceImpl<typeof Backend>;
  state(): BackendSimState;
}

const encoder = new TextEncoder();
type ReplyInit = MessageInitShape<typeof ReplySchema>;

function mismatch(loaded: string, requested: string): WardenError {
  return new WardenError(Code.NotFound, `backend-sim: model identity mismatch: loaded ${JSON.stringify(loaded)}, requested ${JSON.stringify(requested)}`);
}

/** One answer of the mismatch_file knob: true (and the count decremented) while it holds a count above 0. */
function takeMismatch(path: string): boolean {
  let n: number;
  try {
    n = Number.parseInt(readFileSync(path, "utf8"), 10);
  } catch {
    return false;
  }
  if (!(n > 0)) return false;
  writeFileSync(path, String(n - 1));
  return true;
}

/**
 * backend.Backend implemented with fault knobs. Predict and PredictStream echo
 * the model identity: the reply text starts with `<model>:`. A request whose
 * `ModelIdentity` names another model than the one loaded fails NOT_FOUND
 * "model identity mismatch", as upstream backends answer (the recycled-port
 * guard); any request before a LoadModel succeeded fails FAILED_PRECONDITION
 * "model not loaded". Other modalities: sim-modalities.ts; the rest of the
 * service answers UNIMPLEMENTED, as upstream stubs do.
 */
export function createBackendSim(options: BackendSimOptions): BackendSim {
  const clock = options.clock ?? systemClock;
  const hooks = options.hooks;
  let knobs: SimKnobs = { ...options.knobs };
  let model: string | undefined;
  let inFlight = 0;
  let predictCount = 0;
  let freeCalls = 0;
  let allocation: Buffer | undefined;
  const slots = new SimSlots(() => knobs.parallel);
  const prefixCache = new SimPrefixCache(() => knobs.prefixCacheBlocks, () => knobs.prefixBlockChars);

  /**
   * The prompt's prefill, once a slot is taken: its blocks looked up in the
   * prefix cache, the uncached ones costing prefill_block_ms each. With
   * either knob set, the call log's line (written here, not on arrival) says what was cached and which
   * process served (`Predict cached=<blocks cached>/<blocks> pid=<pid>`).
   */
  const prefixOn = (): boolean => knobs.prefillBlockMs > 0 || knobs.prefixCacheBlocks > 0;
  const prefill = (method: string, req: PredictOptions): number => {
    if (!prefixOn()) return 0;
    const r = prefixCache.prefill(simPromptText(req));
    log(`${method} cached=${String(r.cached)}/${String(r.blocks)} pid=${String(process.pid)}`);
    return (r.blocks - r.cached) * knobs.prefillBlockMs;
  };

  /** The prompt and the answer generated after it, cached once the answer is whole (prefix_cache_output). */
  const rememberAnswer = (req: PredictOptions, answer: string): void => {
    if (prefixOn() && knobs.prefixCacheOutput) prefixCache.remember(simPromptText(req) + simContinuation(req, answer));
  };

  const log = (line: string): void => {
    if (knobs.callLog === "") return;
    try {
      appendFileSync(knobs.callLog, `${line}\n`);
    } catch {
      // the call log is a test aid; failing to write it must not fail the RPC
    }
  };

  const checkIdentity = (identity: string): string => {
    // Upstream's wording and codes (LocalAI grpcerrors): FAILED_PRECONDITION
    // "model not loaded"; NOT_FOUND "model identity mismatch" (its router's stale-route signal).
    if (model === undefined) throw new WardenError(Code.FailedPrecondition, "backend-sim: model not loaded");
    if (identity !== "" && knobs.mismatchFile !== "" && takeMismatch(knobs.mismatchFile)) throw mismatch(`${model}~recycled`, identity);
    if (identity !== "" && identity !== model) throw mismatch(model, identity);
    return model;
  };

  const countPredict = (): void => {
    predictCount++;
    if (knobs.crashAfter > 0 && predictCount >= knobs.crashAfter) hooks.exit(knobs.crashExitCode, `crash_after ${String(knobs.crashAfter)} requests`);
  };

  const impl: ServiceImpl<typeof Backend> = withUnimplemented(Backend, {
    ...simModalities({
      held: checkIdentity,
      log,
      delayMs: () => knobs.predictDelayMs,
      ttsStream: () => knobs.ttsStream,
      clock,
      async running(fn) {
        inFlight++;
        try {
          return await fn();
        } finally {
          inFlight--;
        }
      },
    }),
    async generateImage(req) {
      log("GenerateImage");
      checkIdentity(req.ModelIdentity);
      return simGenerateImage(req);
    },
    async health() {
      log("Health");
      return { message: encoder.encode("OK") };
    },

    async loadModel(req, ctx) {
      if (req.Model === "") throw invalidArgument("Model", "must not be empty");
      if (model !== undefined && model !== req.Model) throw new WardenError(Code.FailedPrecondition, `already holds model "${model}"`);
      const next = parseSimOptions(req.Options, knobs);
      knobs = next;
      // logged after the options are applied, so a call_log given there records this call too
      log("LoadModel");
      hooks.setIgnoreSigterm(knobs.ignoreSigterm);
      if (knobs.exitCode >= 0) hooks.exit(knobs.exitCode, "exit_code knob in LoadModel");
      if (knobs.loadDelayMs > 0) await sleep(clock, knobs.loadDelayMs, ctx.signal);
      if (knobs.failLoad !== "") return { success: false, message: knobs.failLoad };
      if (knobs.modelFileSha256 !== "") {
        // The file the caller named, by content: proves which bytes a backend would load.
        let got: string;
        try {
          got = createHash("sha256").update(readFileSync(req.ModelFile)).digest("hex");
        } catch (err) {
          return { success: false, message: `cannot read ModelFile ${JSON.stringify(req.ModelFile)}: ${(err as NodeJS.ErrnoException).code ?? String(err)}` };
        }
        if (got !== knobs.modelFileSha256) return { success: false, message: `ModelFile ${JSON.stringify(req.ModelFile)} hashes to ${got}, not ${knobs.modelFileSha256}` };
      }
      if (knobs.allocMib > 0 && allocation === undefined) {
        // fill() touches every page so the memory is really resident (RSS), not just reserved.
        allocation = Buffer.allocUnsafe(knobs.allocMib * 1024 * 1024).fill(1);
      }
      model = req.Model;
      return { success: true, message: `loaded ${req.Model}` };
    },

    async predict(req, ctx) {
      if (!prefixOn()) log("Predict");
      const held = checkIdentity(req.ModelIdentity);
      countPredict();
      inFlight++;
      let release: (() => void) | undefined;
      try {
        release = await slots.take(ctx.signal);
        const prefillMs = prefill("Predict", req);
        const a = simAnswer(req, { defaultTokens: knobs.predictTokens, echo: knobs.echo });
        const delayMs = prefillMs + knobs.predictDelayMs + a.tokens * knobs.tokenDelayMs;
        if (delayMs > 0) await sleep(clock, delayMs, ctx.signal);
        const answer = `${held}: ${a.chunks.join("")}`;
        rememberAnswer(req, answer);
        return { message: encoder.encode(answer), tokens: a.tokens, promptTokens: a.promptTokens, timingPromptProcessing: prefillMs };
      } finally {
        release?.();
        inFlight--;
      }
    },

    async *predictStream(req, ctx): AsyncIterable<ReplyInit> {
      if (!prefixOn()) log("PredictStream");
      const held = checkIdentity(req.ModelIdentity);
      countPredict();
      inFlight++;
      let release: (() => void) | undefined;
      try {
        release = await slots.take(ctx.signal);
        const prefillMs = prefill("PredictStream", req);
        if (prefillMs > 0) await sleep(clock, prefillMs, ctx.signal);
        const a = simAnswer(req, { defaultTokens: knobs.predictTokens, echo: knobs.echo });
        const delayMs = knobs.predictDelayMs + knobs.tokenDelayMs;
        for (const [i, text] of a.chunks.entries()) {
          if (delayMs > 0) await sleep(clock, delayMs, ctx.signal);
          // Chunks concatenate to exactly what Predict answers: "model: w0 w1 …"; counts are cumulative, as llama.cpp reports them.
          yield { message: encoder.encode(i === 0 ? `${held}: ${text}` : text), tokens: i + 1, promptTokens: a.promptTokens, ...(i === 0 ? { timingPromptProcessing: prefillMs } : {}) };
        }
        rememberAnswer(req, `${held}: ${a.chunks.join("")}`);
      } finally {
        release?.();
        inFlight--;
      }
    },

    async free(_req, ctx) {
      log("Free");
      freeCalls++;
      switch (knobs.free) {
        case "unimplemented":
          throw new WardenError(Code.Unimplemented, "Free is not implemented by this backend");
        case "fail":
          throw new WardenError(Code.Internal, "Free failed (sim knob free:fail)");
        case "hang":
          // Answers only when the caller gives up: exercises the caller's Free cap.
          await new Promise<void>((resolve) => {
            if (ctx.signal.aborted) resolve();
            ctx.signal.addEventListener("abort", () => { resolve(); }, { once: true });
          });
          throw WardenError.from(ctx.signal.reason, Code.Canceled);
        case "ok":
          allocation = undefined;
          model = undefined;
          return { success: true, message: "freed" };
      }
    },

    async status() {
      log("Status");
      const rss = process.memoryUsage().rss;
      const state = model === undefined ? StatusResponse_State.UNINITIALIZED : inFlight > 0 ? StatusResponse_State.BUSY : StatusResponse_State.READY;
      return { state, memory: { total: BigInt(rss), breakdown: { alloc: BigInt(allocation?.length ?? 0), rss: BigInt(rss) } } };
    },
  });

  return {
    impl,
    state: () => ({ model, knobs, inFlight, predictCount, allocatedBytes: allocation?.length ?? 0, freeCalls }),
  };
}
