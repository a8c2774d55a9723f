/**
 * What the pass-through's path check costs Predict: one walk over a
 * PredictOptions that reads the identity and looks at PromptCachePath
 * (backend-path-check.ts, what the data plane does with tokens on) against
 * the identity-only walk it always made (backend-identity.ts), in the same
 * run, interleaved, for a chat-sized request (a 2 KiB prompt, 8 messages,
 * sampling fields) and a 1 MiB prompt. Reproduce: `npm run bench backend-paths`.
 */
import { create, toBinary } from "@bufbuild/protobuf";
import { Backend, PredictOptionsSchema } from "@warden/proto";
import { readIdentity } from "../../services/coordinator/src/routing/backend-identity.js";
import { backendPathPlans, scanRequest } from "../../services/coordinator/src/auth/backend-path-check.js";
import { median, type BenchResult } from "./bench-result.js";

const reps = 7;

function opsPerSecond(iterations: number, fn: () => void): number {
  const t = performance.now();
  for (let i = 0; i < iterations; i++) fn();
  return iterations / ((performance.now() - t) / 1000);
}

export async function run(): Promise<BenchResult[]> {
  const predict = Backend.methods.find((m) => m.name === "Predict");
  const plan = backendPathPlans.get("Predict");
  if (predict === undefined || plan === undefined) throw new Error("no Predict plan");
  const identityField = 54;
  const chat = toBinary(
    PredictOptionsSchema,
    create(PredictOptionsSchema, {
      Prompt: "p".repeat(2048),
      Messages: Array.from({ length: 8 }, (_, i) => ({ role: i % 2 === 0 ? "user" : "assistant", content: "m".repeat(200) })),
      Tokens: 256, Temperature: 0.7, TopP: 0.9, TopK: 40, StopPrompts: ["</s>"], UseTokenizerTemplate: true, ModelIdentity: "chat-large",
    }),
  );
  const large = toBinary(PredictOptionsSchema, create(PredictOptionsSchema, { Prompt: "p".repeat(1024 * 1024), ModelIdentity: "chat-large" }));
  const results: BenchResult[] = [];
  for (const [label, bytes, iterations] of [["chat-sized Predict (4 KiB)", chat, 200_000], ["Predict with a 1 MiB prompt", large, 200_000]] as const) {
    let sink = 0;
    const ours: number[] = [];
    const base: number[] = [];
    // Warm both paths, then interleave.
    opsPerSecond(iterations / 10, () => (sink += scanRequest(bytes, predict.input, identityField, plan).identity.length));
    opsPerSecond(iterations / 10, () => (sink += readIdentity(bytes, identityField, predict.input).length));
    for (let i = 0; i < reps; i++) {
      ours.push(opsPerSecond(iterations, () => (sink += scanRequest(bytes, predict.input, identityField, plan).identity.length)));
      base.push(opsPerSecond(iterations, () => (sink += readIdentity(bytes, identityField, predict.input).length)));
    }
    if (sink === 0) throw new Error("nothing read");
    results.push({ name: `${label}: identity + path check, median of ${String(reps)}`, baseline: "identity read alone", ours: median(ours), baselineValue: median(base), unit: "requests/s", higherIsBetter: true });
  }
  await Promise.resolve();
  return results;
}
