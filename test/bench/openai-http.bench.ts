/**
 * Streamed chat through the OpenAI-compatible HTTP API
 * (`POST /v1/chat/completions`, `stream: true`, server-sent events to
 * `[DONE]`) against PredictStream over gRPC (InferenceService on the
 * data-plane listener) to the same backend-sim instance, in the same run:
 * 64 concurrent callers (streams/s), and 1 caller's median time to first
 * token (the difference is what the HTTP layer adds: fastify, JSON parse and
 * validation, SSE framing). Next to them, PredictStream straight to the
 * backend (no Warden at all). Every stream carries 8 tokens on each side.
 *
 * The HTTP callers use node:http with a keep-alive agent and read the SSE
 * stream as bytes (the official client's own cost would blur what Warden adds).
 */
import { Agent, request } from "node:http";
import { createClient } from "@warden/grpc";
import { AdminService, Backend, InferenceService } from "@warden/proto";
import { median, throughput, type BenchResult } from "./bench-result.js";
import { startBenchCoordinator } from "./bench-coordinator.js";

const tokens = 8;
const callers = 64;

/** One streamed chat over HTTP: resolves with ms to the first content chunk once `[DONE]` arrived; throws on anything else. */
function httpStream(agent: Agent, address: string, body: string): Promise<number> {
  const colon = address.lastIndexOf(":");
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = request({ agent, host: address.slice(0, colon), port: Number(address.slice(colon + 1)), method: "POST", path: "/v1/chat/completions", headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) } }, (res) => {
      if (res.statusCode !== 200) {
        reject(new Error(`HTTP ${String(res.statusCode)}`));
        res.resume();
        return;
      }
      // Events: the role chunk, one per token, the finish chunk, [DONE]; the first token is the second event.
      let first = -1;
      let tail = "";
      let events = 0;
      res.setEncoding("utf8");
      res.on("data", (s: string) => {
        const text = tail + s;
        events += text.split("data: ").length - 1;
        if (first < 0 && events >= 2) first = performance.now() - t0;
        tail = text.slice(-5);
      });
      res.on("end", () => {
        if (events !== tokens + 3) reject(new Error(`got ${String(events)} events, not ${String(tokens + 3)}`));
        else resolve(first);
      });
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
}

export async function run(): Promise<BenchResult[]> {
  const coordinator = await startBenchCoordinator("openai-http", 23300);
  try {
    const inference = createClient(InferenceService, coordinator.dataPlane);
    await inference.predict({ model: "m", options: { Prompt: "warm" } });
    const admin = createClient(AdminService, coordinator.address);
    const address = (await admin.listModels({})).instances[0]?.address ?? "";
    admin.close();
    const direct = createClient(Backend, address);
    const agent = new Agent({ keepAlive: true, maxSockets: callers });
    const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], stream: true, max_tokens: tokens });

    const viaHttp = (): Promise<number> => httpStream(agent, coordinator.http, body);
    const grpcStream = async (open: () => AsyncIterable<unknown>): Promise<number> => {
      const t0 = performance.now();
      let first = -1;
      let n = 0;
      for await (const _ of open()) {
        if (first < 0) first = performance.now() - t0;
        n++;
      }
      if (n !== tokens) throw new Error(`got ${String(n)} replies, not ${String(tokens)}`);
      return first;
    };
    const viaGrpc = (): Promise<number> => grpcStream(() => inference.predictStream({ model: "m", options: { Messages: [{ role: "user", content: "hi" }], UseTokenizerTemplate: true, Tokens: tokens } }));
    const straight = (): Promise<number> => grpcStream(() => direct.predictStream({ Messages: [{ role: "user", content: "hi" }], UseTokenizerTemplate: true, Tokens: tokens, ModelIdentity: "m" }));

    await throughput(500, 16, viaHttp);
    await throughput(500, 16, viaGrpc);
    await throughput(500, 16, straight);
    // Interleaved rounds, medians: the three processes share two cores, so single runs are noisy.
    const rounds = 5;
    const http: number[] = [];
    const grpc: number[] = [];
    const base: number[] = [];
    for (let i = 0; i < rounds; i++) {
      grpc.push(await throughput(1500, callers, viaGrpc));
      http.push(await throughput(1500, callers, viaHttp));
      base.push(await throughput(1500, callers, straight));
    }
    const ttftHttp: number[] = [];
    const ttftGrpc: number[] = [];
    for (let i = 0; i < 400; i++) {
      ttftGrpc.push(await viaGrpc());
      ttftHttp.push(await viaHttp());
    }
    const th = median(ttftHttp);
    const tg = median(ttftGrpc);
    agent.destroy();
    direct.close();
    inference.close();
    return [
      { name: `streamed chat (${String(tokens)} tokens), ${String(callers)} callers: /v1/chat/completions (SSE) vs PredictStream over gRPC`, baseline: "InferenceService.PredictStream, data plane", ours: median(http), baselineValue: median(grpc), unit: "streams/s", higherIsBetter: true },
      { name: `streamed chat (${String(tokens)} tokens), ${String(callers)} callers: /v1/chat/completions (SSE) vs the backend itself`, baseline: "PredictStream straight to backend-sim", ours: median(http), baselineValue: median(base), unit: "streams/s", higherIsBetter: true },
      { name: `time to first token, 1 caller, median (the HTTP layer adds ${(th - tg).toFixed(3)} ms)`, baseline: "InferenceService.PredictStream, data plane", ours: th, baselineValue: tg, unit: "ms", higherIsBetter: false },
    ];
  } finally {
    await coordinator.close();
  }
}
