import { describe, expect, it } from "vitest";
import { Metadata } from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ManualClock } from "@warden/common";
import type { HandlerContext } from "@warden/grpc";
import { ModelOptionsSchema, PredictOptionsSchema } from "@warden/proto";
import { createBackendSim } from "./backend-sim-service.js";
import { defaultSimKnobs } from "./sim-knobs.js";
import { SimPrefixCache, simContinuation, simPromptText } from "./sim-prefix-cache.js";

const ctx = (): HandlerContext => ({ signal: new AbortController().signal, metadata: new Metadata(), peer: "test", deadlineAtMs: undefined, responseHeader: new Metadata(), responseTrailer: new Metadata() });
const tick = () => new Promise((r) => setImmediate(r));

describe("backend-sim prefix cache", () => {
  it("hits the leading whole blocks it holds, evicts least recently used past its capacity", () => {
    const c = new SimPrefixCache(() => 4, () => 4);
    expect(c.prefill("aaaabbbbcc")).toEqual({ blocks: 3, cached: 0 });
    expect(c.prefill("aaaabbbbccdd")).toEqual({ blocks: 3, cached: 2 });
    // Same second block after another first block: a different prefix, no hit.
    expect(c.prefill("zzzzbbbb")).toEqual({ blocks: 2, cached: 0 });
    expect(c.size).toBe(4);
    // aaaa·bbbb·ccdd, zzzz·bbbb held (5 > 4): aaaa, the least recently used, went.
    expect(c.prefill("aaaabbbb")).toEqual({ blocks: 2, cached: 0 });
    const off = new SimPrefixCache(() => 0, () => 4);
    off.prefill("aaaabbbb");
    expect(off.prefill("aaaabbbb")).toEqual({ blocks: 2, cached: 0 });
    expect(simPromptText(create(PredictOptionsSchema, { Messages: [{ role: "user", content: "hi" }] }))).toBe("[user] hi\n");
  });

  it("a Predict waits prefill_block_ms per uncached block before answering, reports it, and logs the hit and its pid", async () => {
    const dir = mkdtempSync(join(tmpdir(), "sim-prefix-"));
    try {
      const clock = new ManualClock();
      const s = createBackendSim({ knobs: { ...defaultSimKnobs }, clock, hooks: { exit: () => undefined, setIgnoreSigterm: () => undefined } });
      const log = join(dir, "calls.log");
      await s.impl.loadModel(create(ModelOptionsSchema, { Model: "a", Options: ["sim.prefill_block_ms:10", "sim.prefix_cache_blocks:100", "sim.prefix_block_chars:4", `sim.call_log:${log}`] }), ctx());
      const req = create(PredictOptionsSchema, { Prompt: "aaaabbbbcc", ModelIdentity: "a", Tokens: 1 });
      let first: { timingPromptProcessing?: number } | undefined;
      const p = s.impl.predict(req, ctx()).then((r) => (first = r));
      await tick();
      clock.advance(29);
      await tick();
      expect(first).toBeUndefined();
      clock.advance(1);
      await p;
      expect(first?.timingPromptProcessing).toBe(30);
      // The same prompt again: two whole blocks cached, the partial one prefilled.
      const again = s.impl.predict(req, ctx());
      await tick();
      clock.advance(10);
      expect((await again).timingPromptProcessing).toBe(10);
      expect(readFileSync(log, "utf8").trim().split("\n").slice(1)).toEqual([`Predict cached=0/3 pid=${String(process.pid)}`, `Predict cached=2/3 pid=${String(process.pid)}`]);
      // Streams pay the prefill before the first token.
      const chunks: number[] = [];
      const stream = (async () => {
        for await (const r of s.impl.predictStream(create(PredictOptionsSchema, { Prompt: "ddddeeee", ModelIdentity: "a", Tokens: 2 }), ctx())) chunks.push(r.timingPromptProcessing ?? 0);
      })();
      await tick();
      clock.advance(19);
      await tick();
      expect(chunks).toEqual([]);
      clock.advance(1);
      await stream;
      expect(chunks).toEqual([20, 0]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("caches the answer after the prompt, as an engine keeps generated tokens: the next turn resending it finds the whole previous turn cached (off with prefix_cache_output:0)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "sim-prefix-"));
    try {
      const hits = async (output: boolean): Promise<string[]> => {
        const log = join(dir, `calls-${String(output)}.log`);
        const s = createBackendSim({ knobs: { ...defaultSimKnobs }, clock: new ManualClock(), hooks: { exit: () => undefined, setIgnoreSigterm: () => undefined } });
        await s.impl.loadModel(create(ModelOptionsSchema, { Model: "a", Options: ["sim.prefix_cache_blocks:100", "sim.prefix_block_chars:4", `sim.prefix_cache_output:${output ? "1" : "0"}`, `sim.call_log:${log}`] }), ctx());
        const messages = [{ role: "user", content: "tell me" }];
        const answer = new TextDecoder().decode((await s.impl.predict(create(PredictOptionsSchema, { Messages: messages, ModelIdentity: "a", Tokens: 4 }), ctx())).message);
        let streamed = "";
        const turn2 = [...messages, { role: "assistant", content: answer }, { role: "user", content: "more" }];
        for await (const r of s.impl.predictStream(create(PredictOptionsSchema, { Messages: turn2, ModelIdentity: "a", Tokens: 3 }), ctx())) streamed += new TextDecoder().decode(r.message);
        await s.impl.predict(create(PredictOptionsSchema, { Messages: [...turn2, { role: "assistant", content: streamed }, { role: "user", content: "again" }], ModelIdentity: "a", Tokens: 1 }), ctx());
        // A plain prompt: its continuation is the answer itself.
        const prompt = "<user>hi<assistant>";
        const plain = new TextDecoder().decode((await s.impl.predict(create(PredictOptionsSchema, { Prompt: prompt, ModelIdentity: "a", Tokens: 5 }), ctx())).message);
        await s.impl.predict(create(PredictOptionsSchema, { Prompt: `${prompt}${plain}<user>ok`, ModelIdentity: "a", Tokens: 1 }), ctx());
        return readFileSync(log, "utf8").trim().split("\n").slice(1).map((l) => l.replace(/ pid=\d+$/, ""));
      };
      const whole = (text: string): number => Math.floor(text.length / 4);
      const r1 = "[user] tell me\n";
      const withAnswer = await hits(true);
      const without = await hits(false);
      // Turn 2 found turn 1's prompt and answer cached (all whole blocks of their render), turn 3 turn 2's.
      const turn2Cached = Number(/cached=(\d+)/.exec(withAnswer[1] ?? "")?.[1]);
      expect(turn2Cached).toBeGreaterThanOrEqual(whole(r1) + 2);
      expect(Number(/cached=(\d+)/.exec(withAnswer[2] ?? "")?.[1])).toBeGreaterThan(turn2Cached);
      expect(Number(/cached=(\d+)/.exec(withAnswer[4] ?? "")?.[1])).toBeGreaterThan(whole("<user>hi<assistant>"));
      // Without: only the prompts themselves were cached.
      expect(Number(/cached=(\d+)/.exec(without[1] ?? "")?.[1])).toBe(whole(r1));
      expect(Number(/cached=(\d+)/.exec(without[4] ?? "")?.[1])).toBe(whole("<user>hi<assistant>"));
      expect(simContinuation(create(PredictOptionsSchema, { Prompt: "p" }), "x")).toBe("x");
      expect(simContinuation(create(PredictOptionsSchema, { Messages: [{ role: "user", content: "q" }] }), "x")).toBe("[assistant] x\n");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
