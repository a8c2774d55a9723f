import { describe, expect, it } from "vitest";
import { Metadata } from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import { Code, ManualClock, isWardenError } from "@warden/common";
import type { HandlerContext } from "@warden/grpc";
import { HealthMessageSchema, ModelOptionsSchema, PredictOptionsSchema, StatusResponse_State } from "@warden/proto";
import { createBackendSim } from "./backend-sim-service.js";
import { defaultSimKnobs } from "./sim-knobs.js";

function ctx(signal = new AbortController().signal): HandlerContext {
  return { signal, metadata: new Metadata(), peer: "test", deadlineAtMs: undefined, responseHeader: new Metadata(), responseTrailer: new Metadata() };
}

function sim(knobs = {}) {
  const exits: { code: number; reason: string }[] = [];
  const ignore: boolean[] = [];
  const clock = new ManualClock();
  const s = createBackendSim({ knobs: { ...defaultSimKnobs, ...knobs }, clock, hooks: { exit: (code, reason) => exits.push({ code, reason }), setIgnoreSigterm: (v) => ignore.push(v) } });
  return { s, exits, ignore, clock };
}

const load = (model: string, options: string[] = []) => create(ModelOptionsSchema, { Model: model, Options: options });
const predict = (identity: string, tokens = 0) => create(PredictOptionsSchema, { Prompt: "p", ModelIdentity: identity, Tokens: tokens });
const empty = create(HealthMessageSchema, {});
const text = (b: Uint8Array) => new TextDecoder().decode(b);

describe("backend-sim service", () => {
  it("echoes the loaded model and rejects another ModelIdentity with FAILED_PRECONDITION", async () => {
    const { s } = sim();
    expect(isWardenError(await s.impl.predict(predict("a"), ctx()).catch((e: unknown) => e), Code.FailedPrecondition)).toBe(true);
    expect(await s.impl.loadModel(load("a"), ctx())).toMatchObject({ success: true });
    const r = await s.impl.predict(predict("a", 2), ctx());
    expect(text(r.message as Uint8Array)).toBe("a: w0 w1");
    expect(isWardenError(await s.impl.predict(predict("b"), ctx()).catch((e: unknown) => e), Code.FailedPrecondition)).toBe(true);
    const tokens: string[] = [];
    for await (const t of s.impl.predictStream(predict("a"), ctx())) tokens.push(text(t.message as Uint8Array));
    expect(tokens).toEqual(["a: w0", " w1", " w2"]);
    expect((await s.impl.status(empty, ctx())).state).toBe(StatusResponse_State.READY);
  });

  it("applies knobs from LoadModel options: fail_load, exit_code, ignore_sigterm, alloc_mib", async () => {
    const failing = sim();
    expect(await failing.s.impl.loadModel(load("a", ["sim.fail_load:no weights"]), ctx())).toEqual({ success: false, message: "no weights" });
    const exiting = sim();
    await exiting.s.impl.loadModel(load("a", ["sim.exit_code:5"]), ctx());
    expect(exiting.exits).toEqual([{ code: 5, reason: "exit_code knob in LoadModel" }]);
    const stubborn = sim();
    await stubborn.s.impl.loadModel(load("a", ["sim.ignore_sigterm:true", "sim.alloc_mib:2"]), ctx());
    expect(stubborn.ignore).toEqual([true]);
    expect(stubborn.s.state().allocatedBytes).toBe(2 * 1024 * 1024);
    const st = await stubborn.s.impl.status(empty, ctx());
    expect(st.memory?.breakdown?.alloc).toBe(2n * 1024n * 1024n);
  });

  it("crashes on the Nth request when crash_after is N", async () => {
    const { s, exits } = sim({ crashAfter: 2, crashExitCode: 70 });
    await s.impl.loadModel(load("a"), ctx());
    await s.impl.predict(predict("a"), ctx());
    expect(exits).toEqual([]);
    await s.impl.predict(predict("a"), ctx());
    expect(exits).toEqual([{ code: 70, reason: "crash_after 2 requests" }]);
  });

  it("Free: ok releases the model; unimplemented, fail and hang answer as told", async () => {
    const ok = sim({ allocMib: 1 });
    await ok.s.impl.loadModel(load("a"), ctx());
    expect(await ok.s.impl.free(empty, ctx())).toEqual({ success: true, message: "freed" });
    expect(ok.s.state()).toMatchObject({ model: undefined, allocatedBytes: 0, freeCalls: 1 });
    expect(isWardenError(await sim({ free: "unimplemented" }).s.impl.free(empty, ctx()).catch((e: unknown) => e), Code.Unimplemented)).toBe(true);
    expect(isWardenError(await sim({ free: "fail" }).s.impl.free(empty, ctx()).catch((e: unknown) => e), Code.Internal)).toBe(true);
    const ctl = new AbortController();
    const hang = sim({ free: "hang" }).s.impl.free(empty, ctx(ctl.signal)).catch((e: unknown) => e);
    ctl.abort();
    expect(await hang).toBeInstanceOf(Error);
  });

  it("load delay runs on the injected clock", async () => {
    const { s, clock } = sim({ loadDelayMs: 5_000 });
    let done = false;
    const p = s.impl.loadModel(load("a"), ctx()).then(() => (done = true));
    await new Promise((r) => setImmediate(r));
    clock.advance(4_999);
    await new Promise((r) => setImmediate(r));
    expect(done).toBe(false);
    clock.advance(1);
    await p;
    expect(done).toBe(true);
  });
});
