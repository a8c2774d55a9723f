/**
 * The HTTP role matrix against a real coordinator process (auth on, HTTP
 * listener): every route the process's fastify registered (it logs them at
 * start) × every role, a one-model inference token (for its model and
 * another), no token and an unknown token. Each HTTP answer is checked
 * against what the gRPC API answers the same token for the same thing (the
 * AdminService methods whose data a dashboard route shows or which it calls,
 * InferenceService.Predict for the OpenAI routes): 401 where gRPC says
 * UNAUTHENTICATED, 403 where it says PERMISSION_DENIED, admitted where it
 * admits. A route this test has no row for fails it.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, InferenceService } from "@warden/proto";
import { adminRoleFor, mintToken } from "@warden/coordinator";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { withToken, writeTokensFile } from "./support/auth-tokens.js";

type Caller = "viewer" | "operator" | "admin" | "inference" | "llamaOnly" | "llamaOnlyOther" | "node" | "none" | "wrong";
const callers: readonly Caller[] = ["viewer", "operator", "admin", "inference", "llamaOnly", "llamaOnlyOther", "node", "none", "wrong"];
type Outcome = "allowed" | Code;

/** What a route mirrors on gRPC: nothing (public, or any token), AdminService methods, or InferenceService. */
type Mirror = { readonly t: "public" } | { readonly t: "token" } | { readonly t: "admin"; readonly methods: readonly string[] } | { readonly t: "inference"; readonly modelless?: true };

interface Probe {
  readonly route: string;
  readonly mirror: Mirror;
  /** The request; `model` is the caller's (llama, or whisper for a llama-only token asking for another). */
  readonly request: (model: string) => { readonly path: string; readonly init?: RequestInit };
}

const json = (body: unknown): RequestInit => ({ method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

function transcription(model: string): RequestInit {
  const form = new FormData();
  form.set("model", model);
  form.set("file", new Blob([new Uint8Array(64)], { type: "audio/wav" }), "a.wav");
  return { method: "POST", body: form };
}

/** One row per route (two for the actions: each is its Admin method's own role). A new route needs a row here. */
const probes: readonly Probe[] = [
  { route: "GET /", mirror: { t: "public" }, request: () => ({ path: "/" }) },
  { route: "GET /dashboard/app.css", mirror: { t: "public" }, request: () => ({ path: "/dashboard/app.css" }) },
  { route: "GET /dashboard/app.js", mirror: { t: "public" }, request: () => ({ path: "/dashboard/app.js" }) },
  { route: "GET /ha/leader", mirror: { t: "public" }, request: () => ({ path: "/ha/leader" }) },
  { route: "GET /favicon.ico", mirror: { t: "public" }, request: () => ({ path: "/favicon.ico" }) },
  { route: "GET /api/dashboard/events", mirror: { t: "admin", methods: ["WatchEvents"] }, request: () => ({ path: "/api/dashboard/events?limit=10" }) },
  { route: "GET /api/dashboard/policy", mirror: { t: "admin", methods: ["GetPolicy"] }, request: () => ({ path: "/api/dashboard/policy" }) },
  // A value UpdatePolicy refuses whole: an admitted caller changes nothing.
  { route: "POST /api/dashboard/policy", mirror: { t: "admin", methods: ["UpdatePolicy"] }, request: () => ({ path: "/api/dashboard/policy", init: json({ memoryThreshold: 7 }) }) },
  // A sweep refused whole (a field it may not vary): an admitted caller runs nothing.
  { route: "POST /api/dashboard/policy/sweep", mirror: { t: "admin", methods: ["UpdatePolicy"] }, request: () => ({ path: "/api/dashboard/policy/sweep", init: json({ axes: [{ field: "tickIntervalMs", values: [1] }] }) }) },
  { route: "POST /api/dashboard/actions/:action", mirror: { t: "admin", methods: ["ScaleModel"] }, request: () => ({ path: "/api/dashboard/actions/scale", init: json({ model: "not-configured", max: 1 }) }) },
  { route: "GET /api/dashboard/whoami", mirror: { t: "token" }, request: () => ({ path: "/api/dashboard/whoami" }) },
  { route: "GET /api/dashboard/snapshot", mirror: { t: "admin", methods: ["ListNodes", "ListModels"] }, request: () => ({ path: "/api/dashboard/snapshot" }) },
  { route: "GET /api/dashboard/nodes", mirror: { t: "admin", methods: ["ListNodes"] }, request: () => ({ path: "/api/dashboard/nodes?page_size=10" }) },
  { route: "GET /api/dashboard/models", mirror: { t: "admin", methods: ["ListModels"] }, request: () => ({ path: "/api/dashboard/models?page_size=10" }) },
  { route: "GET /api/dashboard/explain", mirror: { t: "admin", methods: ["ExplainPlacement"] }, request: (m) => ({ path: `/api/dashboard/explain?model=${m}` }) },
  { route: "GET /api/dashboard/stream", mirror: { t: "admin", methods: ["WatchEvents", "ListNodes", "ListModels"] }, request: () => ({ path: "/api/dashboard/stream" }) },
  { route: "GET /api/dashboard/logs", mirror: { t: "admin", methods: ["GetInstanceLogs"] }, request: () => ({ path: "/api/dashboard/logs?incarnation=01ARZ3NDEKTSV4RRFFQ69G5FAV" }) },
  { route: "GET /api/dashboard/metrics", mirror: { t: "admin", methods: ["ListNodes", "ListModels"] }, request: () => ({ path: "/api/dashboard/metrics" }) },
  { route: "GET /api/dashboard/ha", mirror: { t: "admin", methods: ["GetHaStatus"] }, request: () => ({ path: "/api/dashboard/ha" }) },
  { route: "POST /api/dashboard/actions/:action", mirror: { t: "admin", methods: ["UndrainNode"] }, request: () => ({ path: "/api/dashboard/actions/undrain", init: json({ nodeId: "nope" }) }) },
  { route: "POST /api/dashboard/actions/:action", mirror: { t: "admin", methods: ["LoadModel"] }, request: () => ({ path: "/api/dashboard/actions/load", init: json({ model: "not-configured" }) }) },
  { route: "GET /v1/models", mirror: { t: "inference", modelless: true }, request: () => ({ path: "/v1/models" }) },
  // As the list: a one-model token's other models are not there for it (404), not forbidden.
  { route: "GET /v1/models/*", mirror: { t: "inference", modelless: true }, request: (model) => ({ path: `/v1/models/${model}` }) },
  { route: "POST /v1/chat/completions", mirror: { t: "inference" }, request: (model) => ({ path: "/v1/chat/completions", init: json({ model, messages: [{ role: "user", content: "hi" }] }) }) },
  { route: "POST /v1/completions", mirror: { t: "inference" }, request: (model) => ({ path: "/v1/completions", init: json({ model, prompt: "hi" }) }) },
  { route: "POST /v1/embeddings", mirror: { t: "inference" }, request: (model) => ({ path: "/v1/embeddings", init: json({ model, input: "hi" }) }) },
  { route: "POST /v1/audio/speech", mirror: { t: "inference" }, request: (model) => ({ path: "/v1/audio/speech", init: json({ model, input: "hi" }) }) },
  { route: "POST /v1/audio/transcriptions", mirror: { t: "inference" }, request: (model) => ({ path: "/v1/audio/transcriptions", init: transcription(model) }) },
  { route: "POST /v1/images/generations", mirror: { t: "inference" }, request: (model) => ({ path: "/v1/images/generations", init: json({ model, prompt: "hi" }) }) },
];

/** A minimal gRPC request per Admin method a route mirrors: an admitted caller gets NOT_FOUND or an answer, nothing changes. */
const adminRequests: Readonly<Record<string, unknown>> = {
  ListNodes: {},
  ListModels: {},
  ExplainPlacement: { model: "llama" },
  GetHaStatus: {},
  GetInstanceLogs: { incarnation: "01ARZ3NDEKTSV4RRFFQ69G5FAV" },
  UndrainNode: { nodeId: "nope" },
  LoadModel: { model: "not-configured" },
  GetPolicy: {},
  UpdatePolicy: { patch: { memoryThreshold: 7 } },
  ScaleModel: { model: "not-configured", max: 1 },
};

const rank: Readonly<Record<string, number>> = { viewer: 1, operator: 2, admin: 3 };

async function grpcOutcome(fn: () => Promise<unknown>): Promise<Outcome> {
  try {
    await fn();
    return "allowed";
  } catch (err) {
    const e = WardenError.from(err);
    return e.code === Code.Unauthenticated || e.code === Code.PermissionDenied ? e.code : "allowed";
  }
}

/** The HTTP answer's outcome; an admitted call must not be a server error either (which matches no gRPC answer). */
function httpOutcome(status: number): Outcome | "server error" {
  if (status === 401) return Code.Unauthenticated;
  if (status === 403) return Code.PermissionDenied;
  return status < 500 ? "allowed" : "server error";
}

/** The worst of several gRPC outcomes: a route needs every method it mirrors. */
function worst(outcomes: readonly Outcome[]): Outcome {
  if (outcomes.includes(Code.Unauthenticated)) return Code.Unauthenticated;
  return outcomes.includes(Code.PermissionDenied) ? Code.PermissionDenied : "allowed";
}

describe("auth: the HTTP listener's roles are the gRPC API's", () => {
  let dir: string;
  let coord: CoordinatorProcess;
  let base: string;
  let tokens: Record<"viewer" | "operator" | "admin" | "inference" | "llamaOnly" | "node", string>;
  const wrongToken = mintToken();
  const admins = new Map<Caller, Client<typeof AdminService>>();
  const inferences = new Map<Caller, Client<typeof InferenceService>>();

  const tokenOf = (c: Caller): string | undefined => (c === "none" ? undefined : c === "wrong" ? wrongToken : c === "llamaOnlyOther" ? tokens.llamaOnly : tokens[c]);
  const modelOf = (c: Caller): string => (c === "llamaOnlyOther" ? "whisper" : "llama");

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-http-roles-"));
    const t = await writeTokensFile(dir, {
      viewer: { role: "viewer" },
      operator: { role: "operator" },
      admin: { role: "admin" },
      inference: { role: "inference" },
      llamaOnly: { role: "inference", models: ["llama"] },
      node: { role: "node", node: "gpu-1" },
    });
    tokens = t.tokens;
    // No model and no agent: an admitted call is NOT_FOUND at once, nothing starts or changes.
    coord = await startCoordinatorProcess(join(dir, "coordinator.yaml"), { listen: "127.0.0.1:0", httpListen: "127.0.0.1:0", stateDir: join(dir, "state"), embeddedAgent: false, recoveryWindow: "0s", auth: { tokensFile: t.path }, models: [] });
    base = `http://${coord.httpAddress ?? "none"}`;
    for (const c of callers) {
      admins.set(c, createClient(AdminService, coord.address, withToken(tokenOf(c))));
      inferences.set(c, createClient(InferenceService, coord.address, withToken(tokenOf(c))));
    }
  }, 120_000);

  afterAll(async () => {
    for (const c of [...admins.values(), ...inferences.values()]) c.close();
    await coord.kill();
    await rm(dir, { recursive: true, force: true });
  });

  /** What gRPC answers `caller` for what `mirror` stands for. */
  async function grpcAnswer(mirror: Mirror, caller: Caller): Promise<Outcome> {
    const anyToken = caller === "none" || caller === "wrong" ? Code.Unauthenticated : "allowed";
    switch (mirror.t) {
      case "public":
        return "allowed";
      case "token":
        return anyToken;
      case "inference": {
        const client = inferences.get(caller);
        // A route naming no model (the list: a one-model token sees its own) is the role check alone.
        return grpcOutcome(() => client?.predict({ model: mirror.modelless === true ? "llama" : modelOf(caller), options: { Prompt: "hi", Tokens: 1 } }, { timeoutMs: 20_000 }) ?? Promise.reject(new Error("no client")));
      }
      case "admin": {
        const client = admins.get(caller) as unknown as Record<string, (r: unknown, o: unknown) => Promise<unknown>>;
        const outcomes: Outcome[] = [];
        for (const m of mirror.methods) {
          // A stream never ends by itself: its admission rule is adminRoleFor, which auth-roles.test.ts checks against real WatchEvents calls.
          if (m === "WatchEvents") {
            const role = caller === "llamaOnly" || caller === "llamaOnlyOther" ? "inference" : caller;
            outcomes.push(anyToken !== "allowed" ? anyToken : (rank[role] ?? 0) >= (rank[adminRoleFor(m)] ?? 4) ? "allowed" : Code.PermissionDenied);
            continue;
          }
          const fn = client[m.charAt(0).toLowerCase() + m.slice(1)];
          outcomes.push(await grpcOutcome(() => fn?.call(client, adminRequests[m], { timeoutMs: 20_000 }) ?? Promise.reject(new Error(`no method ${m}`))));
        }
        return worst(outcomes);
      }
    }
  }

  it("has a row for every route the coordinator serves, and the coordinator a rule for each", () => {
    const logged = coord.logLines.find((l) => l.msg === "http routes");
    expect(logged?.unlistedNeedAdmin).toBeUndefined();
    expect(new Set(logged?.routes as string[] | undefined)).toEqual(new Set(probes.map((p) => p.route)));
  });

  it.each(probes.flatMap((p) => callers.map((c) => [p.request("llama").path, p.route, c, p] as const)))("%s (%s) as %s answers as gRPC does", async (_path, _route, caller, probe) => {
    const want = await grpcAnswer(probe.mirror, caller);
    const { path, init } = probe.request(modelOf(caller));
    const token = tokenOf(caller);
    const headers = new Headers(init?.headers);
    if (token !== undefined) headers.set("authorization", `Bearer ${token}`);
    const abort = new AbortController();
    const res = await fetch(`${base}${path}`, { ...init, headers, signal: abort.signal });
    // The event stream stays open: its status is the answer.
    abort.abort();
    expect(httpOutcome(res.status)).toBe(want);
  }, 60_000);

  it("a node or inference token cannot take the dashboard's stream slots", async () => {
    for (const t of [tokens.node, tokens.llamaOnly, tokens.inference]) {
      const res = await fetch(`${base}/api/dashboard/stream`, { headers: { authorization: `Bearer ${t}` } });
      expect(res.status).toBe(403);
      expect(await res.json()).toMatchObject({ error: { code: "permission_denied" } });
    }
  });

  it("one token cannot take every dashboard stream slot: 16 per token (429 naming streams_per_caller), another token still gets one", async () => {
    const aborts: AbortController[] = [];
    const open = async (token: string): Promise<Response> => {
      const abort = new AbortController();
      aborts.push(abort);
      return fetch(`${base}/api/dashboard/stream`, { headers: { authorization: `Bearer ${token}` }, signal: abort.signal });
    };
    try {
      const mine: number[] = [];
      for (let i = 0; i < 16; i++) mine.push((await open(tokens.viewer)).status);
      expect(mine).toEqual(Array.from({ length: 16 }, () => 200));
      const over = await open(tokens.viewer);
      expect(over.status).toBe(429);
      expect(await over.json()).toMatchObject({ error: { code: "resource_exhausted", field: "streams_per_caller" } });
      expect((await open(tokens.operator)).status).toBe(200);
    } finally {
      for (const a of aborts) a.abort();
    }
  });
});
