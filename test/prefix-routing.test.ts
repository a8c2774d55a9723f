/**
 * Prefix-affinity routing over real processes: a coordinator (in this test
 * process, no embedded agent), an agent process spawning three real
 * backend-sim replicas with a prefix cache, real loopback gRPC and HTTP.
 * Which replica served a call and what it found cached come from the
 * backend-sims' own call log (`Predict cached=<hit>/<blocks> pid=<pid>`);
 * held calls come from slow streams cut by the test. Every wait is on a
 * condition, never on time.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { Metadata } from "@grpc/grpc-js";
import { createClient } from "@warden/grpc";
import { Backend, InferenceService, NodeState } from "@warden/proto";
import { startRemoteAgent } from "./support/agent-process.js";
import { startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { replicaCluster } from "./support/replica-cluster.js";
import { inFlightOf, instancesOf, readyOf, replicaModel } from "./support/replica-calls.js";

const cl = replicaCluster("prefix-routing", async () => {
  held?.abort();
  await Promise.allSettled(heldDone);
  held = undefined;
  heldDone = [];
});
let held: AbortController | undefined;
let heldDone: Promise<unknown>[] = [];

/** 256 characters: four 64-character blocks every prompt below starts with. */
const system = "You are the support assistant of a bicycle shop. Answer briefly. ".repeat(4).slice(0, 256);

/** A three-replica model on one node with backend-sim's prefix cache, logging each call to `log`. */
function cachedModel(id: string, log: string, extra: Record<string, unknown>): Record<string, unknown> {
  const base = replicaModel(id, { min: 3, max: 3, targetInFlight: 64 });
  const options = [...(base["options"] as string[]), "sim.prefix_cache_blocks:1000", "sim.prefill_block_ms:1", `sim.call_log:${log}`];
  return { ...base, options, ...extra };
}

async function cluster(models: Record<string, unknown>[], extra: Record<string, unknown> = {}): Promise<TestCoordinator> {
  const t = await startTestCoordinator({ embeddedAgent: false, models, extra });
  cl.tc = t;
  cl.agents.push(await startRemoteAgent({ coordinator: t.c.address, nodeId: "a", tag: cl.tag, config: { maxReplicasPerModel: 3 } }));
  await until("node a ready", async () => (await t.admin.listNodes({})).nodes.some((n) => n.nodeId === "a" && n.state === NodeState.READY), 60_000);
  for (const m of models) await until(`three ready replicas of ${String(m["id"])}`, async () => (await readyOf(t.admin, String(m["id"]))).length === 3, 120_000);
  return t;
}

interface LogLine {
  readonly method: string;
  readonly cached: number;
  readonly blocks: number;
  readonly pid: string;
}

async function callLog(path: string): Promise<LogLine[]> {
  const text = await readFile(path, "utf8").catch(() => "");
  return [...text.matchAll(/^(Predict|PredictStream) cached=(\d+)\/(\d+) pid=(\d+)$/gm)].map((m) => ({ method: m[1] ?? "", cached: Number(m[2]), blocks: Number(m[3]), pid: m[4] ?? "" }));
}

describe("prefix-affinity routing over real processes", { timeout: 300_000 }, () => {
  it("calls sharing a prefix go to one replica and hit its cache, on every route and both ports; a least-in-flight model beside it still spreads", async () => {
    const dir = await mkdtemp(join(tmpdir(), "prefix-routing-"));
    try {
      const pLog = join(dir, "p.log");
      const lLog = join(dir, "l.log");
      const t = await cluster([cachedModel("p", pLog, { routing: "prefix" }), cachedModel("l", lLog, {})], { httpListen: "127.0.0.1:0", inferenceListen: "127.0.0.1:0" });
      const backend = createClient(Backend, t.c.address);
      try {
        const md = new Metadata();
        md.set("warden-model", "p");
        // One after another (nothing in flight): affinity alone decides.
        await t.inference.predict({ model: "p", options: { Prompt: `${system} question one`, Tokens: 1 } }, { timeoutMs: 60_000 });
        await t.inference.predict({ model: "p", options: { Prompt: `${system} question two`, Tokens: 1 } }, { timeoutMs: 60_000 });
        for await (const _ of t.inference.predictStream({ model: "p", options: { Prompt: `${system} question three`, Tokens: 2 } }, { timeoutMs: 60_000 })) {
          // drained
        }
        await backend.predict({ Prompt: `${system} question four`, Tokens: 1 }, { metadata: md, timeoutMs: 60_000 });
        for await (const _ of backend.predictStream({ Prompt: `${system} question five`, Tokens: 2 }, { metadata: md, timeoutMs: 60_000 })) {
          // drained
        }
        const lines = await callLog(pLog);
        expect(lines.map((l) => l.method)).toEqual(["Predict", "Predict", "PredictStream", "Predict", "PredictStream"]);
        expect(new Set(lines.map((l) => l.pid)).size).toBe(1);
        // The first paid for its whole prompt; every later one found the shared four blocks cached.
        expect(lines.map((l) => l.cached)).toEqual([0, 4, 4, 4, 4]);

        // OpenAI chat, multi-turn: each turn resends the history and lands where the history is cached.
        const url = `http://${t.c.httpAddress ?? "none"}/v1/chat/completions`;
        const messages: { role: string; content: string }[] = [{ role: "system", content: system }];
        for (const q of ["Do you fix brakes?", "How much for a tune-up?", "Can I pick it up on Saturday?"]) {
          messages.push({ role: "user", content: q });
          const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "p", messages, max_tokens: 3 }) });
          expect(r.status).toBe(200);
          const body = (await r.json()) as { choices: { message: { content: string } }[] };
          messages.push({ role: "assistant", content: body.choices[0]?.message.content ?? "" });
        }
        const chat = (await callLog(pLog)).slice(5);
        expect(chat).toHaveLength(3);
        expect(new Set(chat.map((l) => l.pid)).size).toBe(1);
        // Turn 2 and 3 found at least the whole previous turn's blocks cached.
        expect(chat[0]?.cached).toBe(0);
        for (const [i, l] of chat.entries()) if (i > 0) expect(l.cached).toBeGreaterThanOrEqual((chat[i - 1]?.blocks ?? Infinity) - 1);

        // least-in-flight: the same prompt, one call after another, goes round its replicas (least recently used).
        for (let i = 0; i < 3; i++) await t.inference.predict({ model: "l", options: { Prompt: `${system} question one`, Tokens: 1 } }, { timeoutMs: 60_000 });
        expect(new Set((await callLog(lLog)).map((l) => l.pid)).size).toBe(3);

        // The data-plane listener: its Predict forwards the request bytes undecoded, its backend.Backend
        // too; the prompt is read from the bytes. A new prefix, one call after another: one replica.
        const other = "Reply in French, then in English, and sign as the shop's robot. ".repeat(4).slice(0, 256);
        const dataPlane = createClient(InferenceService, t.c.inferenceAddress ?? "none");
        const dataPlaneBackend = createClient(Backend, t.c.inferenceAddress ?? "none");
        try {
          for (const q of ["one", "two", "three"]) await dataPlane.predict({ model: "p", options: { Prompt: `${other} data plane ${q}`, Tokens: 1 } }, { timeoutMs: 60_000 });
          await dataPlaneBackend.predict({ Prompt: `${other} data plane four`, Tokens: 1 }, { metadata: md, timeoutMs: 60_000 });
        } finally {
          dataPlane.close();
          dataPlaneBackend.close();
        }
        const plane = (await callLog(pLog)).slice(8);
        expect(plane.map((l) => l.method)).toEqual(["Predict", "Predict", "Predict", "Predict"]);
        expect(new Set(plane.map((l) => l.pid)).size).toBe(1);
        expect(plane.map((l) => l.cached)).toEqual([0, 4, 4, 4]);

        // OpenAI /v1/completions: a third prefix, one call after another, lands on one replica and
        // finds its blocks cached (least-in-flight alone would go round the three, cold each time).
        const third = "Quote prices in euros, list spare parts by catalogue number, no emoji. ".repeat(4).slice(0, 256);
        for (const q of ["one", "two", "three"]) {
          const r = await fetch(`http://${t.c.httpAddress ?? "none"}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "p", prompt: `${third} completion ${q}`, max_tokens: 1 }) });
          expect(r.status).toBe(200);
        }
        const completions = (await callLog(pLog)).slice(12);
        expect(completions).toHaveLength(3);
        expect(new Set(completions.map((l) => l.pid)).size).toBe(1);
        expect(completions.map((l) => l.cached)).toEqual([0, 4, 4]);
      } finally {
        backend.close();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("past prefixBalanceMargin calls sharing a prefix spread: no replica gets more than the margin above the least loaded", async () => {
    const dir = await mkdtemp(join(tmpdir(), "prefix-routing-"));
    try {
      const t = await cluster([cachedModel("p", join(dir, "p.log"), { routing: "prefix", prefixBalanceMargin: 2 })]);
      held = new AbortController();
      const signal = held.signal;
      // Six held streams with one prefix, each counted in flight before the next: 3 on the first
      // replica (0, 1, 2 above the others), then the margin sends the 4th elsewhere, and its
      // affinity takes the 5th and 6th there too.
      for (let i = 0; i < 6; i++) {
        heldDone.push(
          (async () => {
            for await (const _ of t.inference.predictStream({ model: "p", options: { Prompt: `${system} held ${String(i)}`, Tokens: 100_000 } }, { signal })) {
              // until the abort
            }
          })().catch(() => undefined),
        );
        await until(`held call ${String(i)} in flight`, async () => inFlightOf(await instancesOf(t.admin, "p")) === i + 1, 60_000);
      }
      const counts = (await instancesOf(t.admin, "p")).map((r) => r.inFlight).sort();
      expect(counts).toEqual([0, 3, 3]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
