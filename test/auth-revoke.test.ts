/**
 * Revocation is immediate: a real coordinator process (auth on, HTTP
 * listener, embedded agent) with WatchEvents streams over real gRPC and
 * dashboard event streams over real HTTP, each opened with its own token.
 * The tokens file is rewritten (one token dropped, one turned from viewer
 * into an inference token) and the process gets SIGHUP: the streams of
 * those two end at once, with UNAUTHENTICATED / PERMISSION_DENIED (gRPC) or
 * an `error` event and the end of the stream (SSE), before the next event;
 * a token the reload kept streams on.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { createClient, type Client } from "@warden/grpc";
import { Metadata } from "@grpc/grpc-js";
import { AdminService, Backend, InferenceService } from "@warden/proto";
import { eventTypeOf } from "@warden/events";
import { mintToken, tokenLine, type Role } from "@warden/coordinator";
import { parseSse, type SseMessage } from "../services/coordinator/src/http/dashboard/sse-parse.js";
import { simModel } from "./support/coordinator-harness.js";
import { startCoordinatorProcess, unloadEverything, type CoordinatorProcess } from "./support/coordinator-process.js";
import { testPortRange } from "./support/port-range.js";
import { withToken } from "./support/auth-tokens.js";

type Who = "kept" | "dropped" | "narrowed";
const everyone: readonly Who[] = ["kept", "dropped", "narrowed"];
/** Generous: a loaded 2-core machine. Conditions are awaited, never timed. */
const waitMs = 60_000;

/** Resolves once `pred` holds (checked every 50 ms); throws past a generous deadline, which only a hang reaches. */
async function until(pred: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + waitMs;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`waited ${String(waitMs)}ms for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A WatchEvents stream read to its end: the limits events it saw and how it ended. */
interface Watch {
  readonly limits: number[];
  ended: "ok" | Code | undefined;
  readonly client: Client<typeof AdminService>;
}

function watch(address: string, token: string): Watch {
  const client = createClient(AdminService, address, withToken(token));
  const w: Watch = { limits: [], ended: undefined, client };
  void (async () => {
    try {
      for await (const r of client.watchEvents({}, { timeoutMs: 10 * waitMs })) {
        if (r.event !== undefined && eventTypeOf(r.event) === "node.limits-set" && r.event.payload.case === "nodeLimitsSet") w.limits.push(r.event.payload.value.override?.maxReplicasPerModel ?? 0);
      }
      w.ended = "ok";
    } catch (err) {
      w.ended = WardenError.from(err).code;
    }
  })();
  return w;
}

/** A dashboard event stream read to its end. */
interface Sse {
  readonly frames: SseMessage[];
  status: number | undefined;
  ended: boolean;
  readonly abort: AbortController;
}

function sse(base: string, token: string): Sse {
  const s: Sse = { frames: [], status: undefined, ended: false, abort: new AbortController() };
  void (async () => {
    try {
      const res = await fetch(`${base}/api/dashboard/stream`, { headers: { authorization: `Bearer ${token}` }, signal: s.abort.signal });
      s.status = res.status;
      let buf = "";
      const dec = new TextDecoder();
      if (res.body !== null) {
        for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
          const parsed = parseSse(buf + dec.decode(chunk, { stream: true }));
          buf = parsed.rest;
          s.frames.push(...parsed.messages);
        }
      }
    } catch {
      // Aborted by the test's cleanup, or the connection cut: either way, ended.
    }
    s.ended = true;
  })();
  return s;
}

/** The maxReplicasPerModel values of the node.limits-set events a dashboard stream carried. */
function sseLimits(s: Sse): number[] {
  return s.frames.filter((f) => f.event === "event").map((f) => JSON.parse(f.data) as { nodeLimitsSet?: { override?: { maxReplicasPerModel?: number } } }).filter((e) => e.nodeLimitsSet !== undefined).map((e) => e.nodeLimitsSet?.override?.maxReplicasPerModel ?? 0);
}

describe("revoking a token ends its open streams", () => {
  let dir: string;
  let coord: CoordinatorProcess;
  let base: string;
  let tokensFile: string;
  const tokens: Record<Who | "operator" | "chatKept" | "chatNarrowed", string> = { kept: mintToken(), dropped: mintToken(), narrowed: mintToken(), operator: mintToken(), chatKept: mintToken(), chatNarrowed: mintToken() };

  const writeTokens = (lines: readonly (readonly [keyof typeof tokens, Role, string[]?])[]): Promise<void> =>
    writeFile(tokensFile, `${lines.map(([k, role, models]) => tokenLine(tokens[k], role, { name: k, ...(models === undefined ? {} : { models }) })).join("\n")}\n`, { mode: 0o600 });

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-revoke-"));
    tokensFile = join(dir, "tokens");
    await writeTokens([["kept", "viewer"], ["dropped", "viewer"], ["narrowed", "viewer"], ["operator", "operator"], ["chatKept", "inference", ["chat"]], ["chatNarrowed", "inference", ["chat", "other"]]]);
    coord = await startCoordinatorProcess(join(dir, "coordinator.yaml"), {
      listen: "127.0.0.1:0",
      httpListen: "127.0.0.1:0",
      stateDir: join(dir, "state"),
      embeddedAgent: true,
      auth: { tokensFile },
      agent: { nodeId: "local", ports: { ...testPortRange(), quarantine: "1s" }, nvidiaSmi: "", catalog: { "backend-sim": { builtin: "backend-sim" } } },
      recoveryWindow: "0s",
      // A stream that goes on for minutes unless ended: 100 000 tokens, 20 ms each.
      models: [simModel("chat", { knobs: { predict_tokens: 100_000, token_delay_ms: 20 } })],
    });
    base = `http://${coord.httpAddress ?? "none"}`;
  }, 120_000);

  afterAll(async () => {
    // The backends go before the coordinator (its killed agent would leave them running).
    await unloadEverything(coord.address, withToken(tokens.operator).headers);
    await coord.kill();
    await rm(dir, { recursive: true, force: true });
  });

  it("a reload that drops a token or narrows its role ends that token's WatchEvents and dashboard streams before the next event; a kept token streams on", async () => {
    const operator = createClient(AdminService, coord.address, withToken(tokens.operator));
    const grpc = Object.fromEntries(everyone.map((w) => [w, watch(coord.address, tokens[w])])) as Record<Who, Watch>;
    const http = Object.fromEntries(everyone.map((w) => [w, sse(base, tokens[w])])) as Record<Who, Sse>;
    try {
      // Every stream is open and live: each sees the same event.
      await until(() => everyone.every((w) => http[w].frames.some((f) => f.event === "snapshot")), "every dashboard stream's first snapshot");
      expect(everyone.map((w) => http[w].status)).toEqual([200, 200, 200]);
      let n = 2;
      // A WatchEvents stream is admitted asynchronously: one event after another until each has seen one
      // (each waited for on the dashboard streams, admitted already, so no event is sent into the void).
      while (!everyone.every((w) => grpc[w].limits.length > 0 || grpc[w].ended !== undefined)) {
        const v = n++;
        await operator.setNodeLimits({ nodeId: "local", limits: { maxReplicasPerModel: v } }, { timeoutMs: waitMs });
        await until(() => everyone.every((w) => sseLimits(http[w]).includes(v) || http[w].ended), `event ${String(v)} on every dashboard stream`);
      }
      expect(everyone.map((w) => [grpc[w].ended, http[w].ended])).toEqual([[undefined, false], [undefined, false], [undefined, false]]);

      const reloads = (): number => coord.logLines.filter((l) => l.msg === "config reloaded").length;
      const before = reloads();
      await writeTokens([["kept", "viewer"], ["narrowed", "inference"], ["operator", "operator"], ["chatKept", "inference", ["chat"]], ["chatNarrowed", "inference", ["chat", "other"]]]);
      coord.child.kill("SIGHUP");
      await until(() => reloads() > before, "the reload");

      // The next event: the kept token's streams carry it; the others ended before it.
      const next = n++;
      await operator.setNodeLimits({ nodeId: "local", limits: { maxReplicasPerModel: next } }, { timeoutMs: waitMs });
      await until(() => grpc.kept.limits.includes(next) && sseLimits(http.kept).includes(next), "the kept token's streams to carry the next event");
      // Each revoked stream either ended or (the defect) carried the event on.
      const settled = (w: Who): boolean => (grpc[w].ended !== undefined || grpc[w].limits.includes(next)) && (http[w].ended || sseLimits(http[w]).includes(next));
      await until(() => settled("dropped") && settled("narrowed"), "the revoked streams to end");
      expect({ dropped: grpc.dropped.ended, narrowed: grpc.narrowed.ended, kept: grpc.kept.ended }).toEqual({ dropped: Code.Unauthenticated, narrowed: Code.PermissionDenied, kept: undefined });
      expect([grpc.dropped.limits.includes(next), grpc.narrowed.limits.includes(next)]).toEqual([false, false]);
      expect([sseLimits(http.dropped).includes(next), sseLimits(http.narrowed).includes(next), http.kept.ended]).toEqual([false, false, false]);
      // Each revoked dashboard stream says why as its last frame.
      const lastError = (s: Sse): unknown => {
        const f = s.frames.at(-1);
        return f?.event === "error" ? (JSON.parse(f.data) as { error: { code: string } }).error.code : f?.event;
      };
      expect([lastError(http.dropped), lastError(http.narrowed)]).toEqual(["unauthenticated", "permission_denied"]);
      // And new calls with them are refused as any would be.
      const snap = async (w: Who): Promise<number> => (await fetch(`${base}/api/dashboard/snapshot`, { headers: { authorization: `Bearer ${tokens[w]}` } })).status;
      expect([await snap("dropped"), await snap("narrowed"), await snap("kept")]).toEqual([401, 403, 200]);
      // The coordinator logged each ending, naming the caller, never the token.
      const ended = coord.logLines.filter((l) => l.msg === "stream ended: its token no longer allows it");
      expect(new Set(ended.map((l) => l.caller))).toEqual(new Set(["dropped", "narrowed"]));
      expect(JSON.stringify(coord.logLines)).not.toContain(tokens.dropped);
    } finally {
      for (const w of everyone) {
        grpc[w].client.close();
        http[w].abort.abort();
      }
      operator.close();
    }
  }, 240_000);

  it("a reload that takes a model off an inference token ends its open PredictStream and backend.Backend stream (PERMISSION_DENIED) and its streamed completion over HTTP; a token that keeps the model streams on", async () => {
    const reloads = (): number => coord.logLines.filter((l) => l.msg === "config reloaded").length;
    const grpc = { kept: { chunks: 0, ended: undefined as "ok" | Code | undefined }, narrowed: { chunks: 0, ended: undefined as "ok" | Code | undefined } };
    // LocalAI's backend.Backend pass-through (the model named in metadata), the same tokens.
    const raw = { kept: { chunks: 0, ended: undefined as "ok" | Code | undefined }, narrowed: { chunks: 0, ended: undefined as "ok" | Code | undefined } };
    const http = { kept: { bytes: 0, ended: false }, narrowed: { bytes: 0, ended: false } };
    const clients: { close(): void }[] = [];
    const aborts: AbortController[] = [];
    for (const w of ["kept", "narrowed"] as const) {
      const token = w === "kept" ? tokens.chatKept : tokens.chatNarrowed;
      const client = createClient(InferenceService, coord.address, withToken(token));
      clients.push(client);
      void (async () => {
        try {
          for await (const _ of client.predictStream({ model: "chat", options: { Prompt: "hi", Tokens: 100_000 } }, { timeoutMs: 10 * waitMs })) grpc[w].chunks++;
          grpc[w].ended = "ok";
        } catch (err) {
          grpc[w].ended = WardenError.from(err).code;
        }
      })();
      const backend = createClient(Backend, coord.address, withToken(token));
      clients.push(backend);
      const metadata = new Metadata();
      metadata.set("warden-model", "chat");
      void (async () => {
        try {
          for await (const _ of backend.predictStream({ Prompt: "hi", Tokens: 100_000 }, { timeoutMs: 10 * waitMs, metadata })) raw[w].chunks++;
          raw[w].ended = "ok";
        } catch (err) {
          raw[w].ended = WardenError.from(err).code;
        }
      })();
      const abort = new AbortController();
      aborts.push(abort);
      void (async () => {
        try {
          const res = await fetch(`${base}/v1/chat/completions`, { method: "POST", signal: abort.signal, headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: JSON.stringify({ model: "chat", messages: [{ role: "user", content: "hi" }], stream: true }) });
          if (res.body !== null) for await (const chunk of res.body as AsyncIterable<Uint8Array>) http[w].bytes += chunk.byteLength;
        } catch {
          // Cut by the coordinator (the revocation) or by the test's cleanup.
        }
        http[w].ended = true;
      })();
    }
    try {
      await until(() => grpc.kept.chunks > 0 && grpc.narrowed.chunks > 0 && raw.kept.chunks > 0 && raw.narrowed.chunks > 0 && http.kept.bytes > 0 && http.narrowed.bytes > 0, "every inference stream's first chunk");
      const before = reloads();
      await writeTokens([["kept", "viewer"], ["operator", "operator"], ["chatKept", "inference", ["chat"]], ["chatNarrowed", "inference", ["other"]]]);
      coord.child.kill("SIGHUP");
      await until(() => reloads() > before, "the reload");
      await until(() => grpc.narrowed.ended !== undefined && raw.narrowed.ended !== undefined && http.narrowed.ended, "the narrowed token's streams to end");
      expect([grpc.narrowed.ended, raw.narrowed.ended]).toEqual([Code.PermissionDenied, Code.PermissionDenied]);
      // The kept token's streams go on past the reload.
      const [g, r, h] = [grpc.kept.chunks, raw.kept.chunks, http.kept.bytes];
      await until(() => grpc.kept.chunks > g && raw.kept.chunks > r && http.kept.bytes > h, "the kept token's streams to go on");
      expect([grpc.kept.ended, raw.kept.ended, http.kept.ended]).toEqual([undefined, undefined, false]);
    } finally {
      for (const c of clients) c.close();
      for (const a of aborts) a.abort();
    }
  }, 240_000);
});
