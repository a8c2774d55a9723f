/**
 * The role matrix over real gRPC on loopback: every AdminService method ×
 * every role, no token and an unknown token; InferenceService on both
 * listeners (grpc-js and the lean data plane) with per-model inference
 * tokens; NodeService takes node tokens only. Every refusal is logged with
 * the peer, the method and the role, never the token.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError, createLogger } from "@warden/common";
import { createClient, createH2Client, type Client } from "@warden/grpc";
import { Metadata } from "@grpc/grpc-js";
import { AdminService, Backend, InferenceService, NodeService } from "@warden/proto";
import { adminRoleFor, mintToken } from "@warden/coordinator";
import { startTestCoordinator, type TestCoordinator } from "./support/coordinator-harness.js";
import { withToken, writeTokensFile } from "./support/auth-tokens.js";

type Caller = "viewer" | "operator" | "admin" | "inference" | "node" | "none" | "wrong";
const callers: readonly Caller[] = ["viewer", "operator", "admin", "inference", "node", "none", "wrong"];

/** A minimal request per Admin method: allowed callers get a real answer (often NOT_FOUND), never a change that matters. */
const adminRequests: Readonly<Record<string, unknown>> = {
  listNodes: {},
  getNode: { nodeId: "nope" },
  drainNode: { nodeId: "nope" },
  undrainNode: { nodeId: "nope" },
  declareNodeLost: { nodeId: "nope", reason: "matrix" },
  listModels: {},
  loadModel: { model: "not-configured" },
  unloadModel: { model: "not-configured" },
  forgetInstance: { nodeId: "nope", incarnation: "01ARZ3NDEKTSV4RRFFQ69G5FAV", operator: "matrix" },
  getPolicy: {},
  updatePolicy: { patch: {} },
  explainPlacement: { model: "not-configured" },
  watchEvents: {},
  // NOT_FOUND for an admitted caller: neither the model nor the node exists.
  scaleModel: { model: "not-configured", min: 1 },
  setNodeLimits: { nodeId: "nope", limits: { maxReplicasPerModel: 2 } },
  getHaStatus: {},
  // Admin only; NOT_FOUND (admitted) while nothing is recorded yet.
  exportTrace: {},
  getInstanceLogs: { incarnation: "01ARZ3NDEKTSV4RRFFQ69G5FAV" },
  listBackendBundles: {},
  // No node has the backend in its catalog: INVALID_ARGUMENT naming backend, nothing sent.
  installBackendBundle: { backend: "no-such-backend", allNodes: true },
  removeBackendBundle: { backend: "no-such-backend", allNodes: true },
};

const rank: Readonly<Record<Caller, number>> = { viewer: 1, operator: 2, admin: 3, inference: 0, node: 0, none: -1, wrong: -1 };

function expected(caller: Caller, need: "viewer" | "operator" | "admin"): "allowed" | Code {
  if (caller === "none" || caller === "wrong") return Code.Unauthenticated;
  return rank[caller] >= rank[need] ? "allowed" : Code.PermissionDenied;
}

/** The call's outcome: "allowed" for anything but the two auth codes. */
async function outcome(fn: () => Promise<unknown>): Promise<"allowed" | Code> {
  try {
    await fn();
    return "allowed";
  } catch (err) {
    const e = WardenError.from(err);
    return e.code === Code.Unauthenticated || e.code === Code.PermissionDenied ? e.code : "allowed";
  }
}

async function callAdmin(client: Client<typeof AdminService>, method: string, tc: TestCoordinator): Promise<unknown> {
  const req = adminRequests[method];
  if (method === "watchEvents") {
    // A stream: an admitted caller gets the events published meanwhile; a refused one gets its status. No deadline decides.
    const tick = setInterval(() => {
      void tc.c.hub.publish({ nodeId: "matrix", payload: { case: "nodeUnreachable", value: { $typeName: "warden.v1.NodeUnreachable" } } });
    }, 100);
    try {
      for await (const _ of client.watchEvents(req as never, { timeoutMs: 30_000 })) break;
    } finally {
      clearInterval(tick);
    }
    return undefined;
  }
  if (method === "exportTrace") {
    for await (const _ of client.exportTrace(req as never, { timeoutMs: 30_000 })) break;
    return undefined;
  }
  return (client as unknown as Record<string, (r: unknown, o: unknown) => Promise<unknown>>)[method]?.(req, { timeoutMs: 20_000 });
}

describe("auth: roles", () => {
  let tc: TestCoordinator;
  let tokensDir: string;
  let tokens: Record<"viewer" | "operator" | "admin" | "inference" | "llamaOnly" | "node", string>;
  const logLines: string[] = [];
  const wrongToken = mintToken();

  beforeAll(async () => {
    tokensDir = await mkdtemp(join(tmpdir(), "warden-auth-"));
    const t = await writeTokensFile(tokensDir, {
      viewer: { role: "viewer" },
      operator: { role: "operator" },
      admin: { role: "admin" },
      inference: { role: "inference" },
      llamaOnly: { role: "inference", models: ["llama"] },
      node: { role: "node", node: "gpu-1" },
    });
    tokens = t.tokens;
    const sink = new Writable({
      write(chunk: Buffer, _enc, cb) {
        logLines.push(...chunk.toString("utf8").split("\n").filter((l) => l !== ""));
        cb();
      },
    });
    tc = await startTestCoordinator({
      // No model configured: an admitted Predict is NOT_FOUND at once (auth is checked before any load), so no backend starts.
      models: [],
      extra: { auth: { tokensFile: t.path }, inferenceListen: "127.0.0.1:0" },
      logger: createLogger({ name: "coordinator", level: "warn", destination: sink }),
    });
  }, 60_000);

  afterAll(async () => {
    await tc.close();
    await rm(tokensDir, { recursive: true, force: true });
  });

  const tokenOf = (c: Caller): string | undefined => (c === "none" ? undefined : c === "wrong" ? wrongToken : tokens[c]);

  const methods = AdminService.methods.map((m) => m.localName);

  it("lists a request for every Admin method (a new method joins the matrix)", () => {
    expect(Object.keys(adminRequests).sort()).toEqual([...methods].sort());
  });

  it.each(methods.flatMap((m) => callers.map((c) => [m, c] as const)))("AdminService.%s as %s", async (method, caller) => {
    const client = createClient(AdminService, tc.c.address, withToken(tokenOf(caller)));
    try {
      const name = AdminService.methods.find((m) => m.localName === method)?.name ?? "";
      expect(await outcome(() => callAdmin(client, method, tc))).toBe(expected(caller, adminRoleFor(name)));
    } finally {
      client.close();
    }
  });

  it("ScaleModel and SetNodeLimits need operator: an operator is admitted, a viewer refused", async () => {
    expect([adminRoleFor("ScaleModel"), adminRoleFor("SetNodeLimits")]).toEqual(["operator", "operator"]);
    const operator = createClient(AdminService, tc.c.address, withToken(tokens.operator));
    const viewer = createClient(AdminService, tc.c.address, withToken(tokens.viewer));
    try {
      for (const method of ["scaleModel", "setNodeLimits"]) {
        expect(await outcome(() => callAdmin(operator, method, tc)), method).toBe("allowed");
        expect(await outcome(() => callAdmin(viewer, method, tc)), method).toBe(Code.PermissionDenied);
      }
    } finally {
      operator.close();
      viewer.close();
    }
  });

  it("the lean CLI client carries the token too (unknown token UNAUTHENTICATED, viewer may list, may not load)", async () => {
    const viewer = createH2Client(AdminService, tc.c.address, withToken(tokens.viewer));
    const wrong = createH2Client(AdminService, tc.c.address, withToken(wrongToken));
    try {
      expect((await viewer.listModels({})).instances).toBeDefined();
      await expect(viewer.loadModel({ model: "llama" })).rejects.toMatchObject({ code: Code.PermissionDenied });
      await expect(wrong.listModels({})).rejects.toMatchObject({ code: Code.Unauthenticated });
    } finally {
      viewer.close();
      wrong.close();
    }
  });

  it.each([
    ["inference", "whisper", "allowed"],
    ["admin", "whisper", "allowed"],
    ["llamaOnly", "llama", "allowed"],
    ["llamaOnly", "whisper", Code.PermissionDenied],
    ["operator", "llama", Code.PermissionDenied],
    ["viewer", "llama", Code.PermissionDenied],
    ["node", "llama", Code.PermissionDenied],
    ["none", "llama", Code.Unauthenticated],
    ["wrong", "llama", Code.Unauthenticated],
  ] as const)("InferenceService as %s for %s: the same answer on the main port and the data plane (typed and raw Predict, PredictStream)", async (who, model, want) => {
    const token = who === "none" ? undefined : who === "wrong" ? wrongToken : tokens[who];
    const main = createClient(InferenceService, tc.c.address, withToken(token));
    const lean = createH2Client(InferenceService, tc.c.inferenceAddress ?? "", withToken(token));
    try {
      const stream = async (c: Client<typeof InferenceService>): Promise<void> => {
        for await (const r of c.predictStream({ model, options: { Prompt: "hi", Tokens: 2 } }, { timeoutMs: 60_000 })) expect(r.reply).toBeDefined();
      };
      const results = [
        await outcome(() => main.predict({ model, options: { Prompt: "hi", Tokens: 2 } }, { timeoutMs: 60_000 })),
        await outcome(() => stream(main)),
        await outcome(() => lean.predict({ model, options: { Prompt: "hi", Tokens: 2 } }, { timeoutMs: 60_000 })),
        await outcome(() => stream(lean)),
      ];
      expect(results).toEqual([want, want, want, want]);
    } finally {
      main.close();
      lean.close();
    }
  }, 120_000);

  it.each([
    ["inference", "whisper", "allowed"],
    ["llamaOnly", "whisper", Code.PermissionDenied],
    ["viewer", "llama", Code.PermissionDenied],
    ["none", "llama", Code.Unauthenticated],
    ["wrong", "llama", Code.Unauthenticated],
  ] as const)("LocalAI's backend.Backend on both ports as %s for %s: behind the same inference tokens", async (who, model, want) => {
    const token = who === "none" ? undefined : who === "wrong" ? wrongToken : tokens[who];
    const main = createClient(Backend, tc.c.address, withToken(token));
    const lean = createClient(Backend, tc.c.inferenceAddress ?? "", withToken(token));
    const metadata = new Metadata();
    metadata.set("warden-model", model);
    try {
      const results = [
        await outcome(() => main.embedding({ Embeddings: "hi" }, { timeoutMs: 60_000, metadata })),
        await outcome(() => lean.embedding({ Embeddings: "hi" }, { timeoutMs: 60_000, metadata })),
      ];
      expect(results).toEqual([want, want]);
    } finally {
      main.close();
      lean.close();
    }
  }, 120_000);

  it("a per-model refusal names the field model", async () => {
    const c = createClient(InferenceService, tc.c.address, withToken(tokens.llamaOnly));
    try {
      await expect(c.predict({ model: "whisper", options: { Prompt: "x" } })).rejects.toMatchObject({ code: Code.PermissionDenied, details: { field: "model" } });
    } finally {
      c.close();
    }
  });

  it.each([
    ["admin", Code.PermissionDenied],
    ["operator", Code.PermissionDenied],
    ["inference", Code.PermissionDenied],
    ["none", Code.Unauthenticated],
    ["wrong", Code.Unauthenticated],
  ] as const)("NodeService as %s is refused: only node tokens speak for nodes", async (who, want) => {
    const c = createClient(NodeService, tc.c.address, withToken(who === "none" ? undefined : who === "wrong" ? wrongToken : tokens[who]));
    try {
      await expect(c.register({ nodeId: "gpu-1", address: "127.0.0.1:1", bootEpoch: 1n })).rejects.toMatchObject({ code: want });
      await expect(c.heartbeat({ nodeId: "gpu-1", bootEpoch: 1n, sequence: 1n })).rejects.toMatchObject({ code: want });
    } finally {
      c.close();
    }
    expect(tc.c.nodes.get("gpu-1")).toBeUndefined();
  });

  it("every refusal is logged with the peer, the method and the role, never the token", () => {
    const refusals = logLines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((o) => o.msg === "call refused");
    expect(refusals.length).toBeGreaterThan(20);
    for (const r of refusals) {
      expect(r).toMatchObject({ peer: expect.stringMatching(/^(ipv4:)?127\.0\.0\.1:\d+$|^127\.0\.0\.1:\d+$/) as unknown, method: expect.stringMatching(/^(warden\.v1\.\w+Service|backend\.Backend)\/\w+$/) as unknown, role: expect.stringMatching(/^(none|viewer|operator|admin|inference|node)$/) as unknown });
    }
    expect(refusals.some((r) => r.role === "viewer" && r.method === "warden.v1.AdminService/LoadModel")).toBe(true);
    expect(refusals.some((r) => r.role === "none" && r.method === "warden.v1.InferenceService/Predict")).toBe(true);
    expect(refusals.some((r) => r.role === "viewer" && r.method === "backend.Backend/Embedding")).toBe(true);
    const all = logLines.join("\n");
    for (const t of [wrongToken, ...Object.values(tokens)]) expect(all).not.toContain(t);
  });
});
