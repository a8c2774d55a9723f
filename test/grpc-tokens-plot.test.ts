/**
 * The dashboard's tokens per second counts gRPC calls as well as the OpenAI
 * routes: Predict on the main port (decoded reply), Predict on the data-plane
 * listener (reply bytes passed through, the count read in place) and
 * PredictStream (the latest count the backend reported). A real coordinator
 * with its embedded agent and backend-sim processes; the plots' samples are
 * read from GET /api/dashboard/metrics.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient, type Client } from "@warden/grpc";
import { InferenceService } from "@warden/proto";
import { simModel, startTestCoordinator, type TestCoordinator } from "./support/coordinator-harness.js";

interface MetricsBody {
  readonly models: { model: string; tokensPerS: (number | null)[] }[];
}

let tc: TestCoordinator;
let dataPlane: Client<typeof InferenceService>;

beforeAll(async () => {
  tc = await startTestCoordinator({ models: [simModel("unary", { knobs: { predict_tokens: 4 } }), simModel("bytes", { knobs: { predict_tokens: 5 } }), simModel("stream", { knobs: { predict_tokens: 3 } })], extra: { httpListen: "127.0.0.1:0", inferenceListen: "127.0.0.1:0" } });
  dataPlane = createClient(InferenceService, tc.c.inferenceAddress ?? "none");
});
afterAll(async () => {
  dataPlane.close();
  await tc.close();
});

/** The ring's tokens per second for `model`, summed over its samples (the ring samples every few seconds). */
async function tokensSeen(model: string): Promise<number> {
  const r = await fetch(`http://${tc.c.httpAddress ?? "none"}/api/dashboard/metrics`);
  const body = (await r.json()) as MetricsBody;
  return (body.models.find((m) => m.model === model)?.tokensPerS ?? []).reduce<number>((a, v) => a + (v ?? 0), 0);
}

describe("tokens per second from gRPC calls", () => {
  it("Predict on both ports and PredictStream add their completion tokens to their model's series", async () => {
    for (const m of ["unary", "bytes", "stream"]) await tc.admin.loadModel({ model: m }, { timeoutMs: 60_000 });
    for (let i = 0; i < 3; i++) {
      const a = await tc.inference.predict({ model: "unary", options: { Prompt: "hi" } }, { timeoutMs: 30_000 });
      expect(a.reply?.tokens).toBe(4);
      const b = await dataPlane.predict({ model: "bytes", options: { Prompt: "hi" } }, { timeoutMs: 30_000 });
      expect(b.reply?.tokens).toBe(5);
      let last = 0;
      for await (const r of tc.inference.predictStream({ model: "stream", options: { Prompt: "hi" } }, { timeoutMs: 30_000 })) last = r.reply?.tokens ?? last;
      expect(last).toBe(3);
    }
    // Every model's tokens land in one sample or split over two; wait for the ring to have taken them.
    const deadline = Date.now() + 60_000;
    let seen = { unary: 0, bytes: 0, stream: 0 };
    while (Date.now() < deadline) {
      seen = { unary: await tokensSeen("unary"), bytes: await tokensSeen("bytes"), stream: await tokensSeen("stream") };
      if (seen.unary > 0 && seen.bytes > 0 && seen.stream > 0) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    expect(seen.unary).toBeGreaterThan(0);
    expect(seen.bytes).toBeGreaterThan(0);
    expect(seen.stream).toBeGreaterThan(0);
  });
});
