/**
 * The coordinator's HTTP listener, started by a real coordinator (embedded
 * agent, real backend-sim processes) on a random loopback port: it serves
 * `/v1/models` with Warden's state, answers unknown routes in OpenAI's error
 * shape, refuses plaintext on a non-loopback address without `insecure`,
 * checks bearer tokens with the gRPC roles, and closes with the coordinator.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { resolveCoordinatorConfig, startCoordinator } from "@warden/coordinator";
import { simModel, startTestCoordinator, type TestCoordinator } from "./support/coordinator-harness.js";
import { writeTokensFile } from "./support/auth-tokens.js";

interface ModelsBody {
  data: { id: string; object: string; warden: { state: string; instances: { state: string; in_flight: number }[] } }[];
}

async function getJson(url: string, token?: string): Promise<{ status: number; body: unknown }> {
  const r = await fetch(url, token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } });
  return { status: r.status, body: await r.json() };
}

describe("http listener", () => {
  let tc: TestCoordinator;
  let base: string;

  beforeAll(async () => {
    tc = await startTestCoordinator({ models: [simModel("alpha"), simModel("beta")], extra: { httpListen: "127.0.0.1:0" } });
    base = `http://${tc.c.httpAddress ?? "none"}`;
  });
  afterAll(async () => {
    await tc.close();
  });

  it("serves /v1/models: the configured models, with their state once loaded", async () => {
    const before = await getJson(`${base}/v1/models`);
    expect(before.status).toBe(200);
    const b = before.body as ModelsBody;
    expect(b.data.map((m) => m.id)).toEqual(["alpha", "beta"]);
    expect(b.data.every((m) => m.object === "model" && m.warden.state === "not_loaded")).toBe(true);
    await tc.admin.loadModel({ model: "alpha" }, { timeoutMs: 30_000 });
    const after = (await getJson(`${base}/v1/models`)).body as ModelsBody;
    expect(after.data.find((m) => m.id === "alpha")?.warden).toMatchObject({ state: "loaded", instances: [{ state: "ready", in_flight: 0 }] });
  });

  it("answers an unknown route 404 in OpenAI's error shape", async () => {
    const r = await getJson(`${base}/v1/nope`);
    expect(r.status).toBe(404);
    expect(r.body).toMatchObject({ error: { type: "invalid_request_error", param: "url", code: null } });
  });

  it("closes with the coordinator; a body past http.bodyLimit is 413 in OpenAI's shape", async () => {
    const dir = await mkdtemp(join(tmpdir(), "warden-http-close-"));
    try {
      const c = await startCoordinator(resolveCoordinatorConfig({ listen: "127.0.0.1:0", stateDir: dir, embeddedAgent: false, httpListen: "127.0.0.1:0", recoveryWindow: "0s", http: { bodyLimit: "1KiB" } }));
      const url = `http://${c.httpAddress ?? "none"}/v1/models`;
      expect((await fetch(url)).status).toBe(200);
      const post = (chars: number): Promise<Response> => fetch(`http://${c.httpAddress ?? "none"}/v1/embeddings`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "none", input: "x".repeat(chars) }) });
      // A body of exactly 1 KiB passes the size check (then 404: no such model); one byte more is 413.
      expect((await post(1024 - 27)).status).toBe(404);
      const big = await post(1024 - 26);
      expect(big.status).toBe(413);
      expect(await big.json()).toMatchObject({ error: { param: "body" } });
      await c.close({ stopBackends: true });
      await expect(fetch(url)).rejects.toThrow();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("http listener: transport and auth", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-http-auth-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("refuses plaintext on a non-loopback address without insecure, naming httpListen", async () => {
    const config = resolveCoordinatorConfig({ listen: "127.0.0.1:0", stateDir: join(dir, "s1"), embeddedAgent: false, httpListen: "0.0.0.0:0", recoveryWindow: "0s" });
    const err = await startCoordinator(config).then(
      async (c) => {
        await c.close({ stopBackends: true });
        return undefined;
      },
      (e: unknown) => WardenError.from(e),
    );
    expect(err?.code).toBe(Code.FailedPrecondition);
    expect(err?.details["field"]).toBe("httpListen");
  });

  it("needs an inference token for /v1 when tokens are configured: 401 without or unknown, 403 for another role", async () => {
    const { path, tokens } = await writeTokensFile(dir, { inference: { role: "inference" }, viewer: { role: "viewer" }, admin: { role: "admin" }, alphaOnly: { role: "inference", models: ["alpha"] } });
    const c = await startCoordinator(resolveCoordinatorConfig({ listen: "127.0.0.1:0", stateDir: join(dir, "s2"), embeddedAgent: false, httpListen: "127.0.0.1:0", recoveryWindow: "0s", auth: { tokensFile: path } }));
    try {
      const url = `http://${c.httpAddress ?? "none"}/v1/models`;
      const none = await getJson(url);
      expect(none.status).toBe(401);
      expect(none.body).toMatchObject({ error: { type: "invalid_request_error", code: "invalid_api_key" } });
      expect((await getJson(url, "wdn_not-a-known-token-at-all-xxxxxxxx")).status).toBe(401);
      const viewer = await getJson(url, tokens.viewer);
      expect(viewer.status).toBe(403);
      expect(viewer.body).toMatchObject({ error: { type: "invalid_request_error", code: null } });
      expect((await getJson(url, tokens.inference)).status).toBe(200);
      expect((await getJson(url, tokens.admin)).status).toBe(200);
      // A token for some models may not call another one: 403 naming model, before anything is routed.
      const other = await fetch(`http://${c.httpAddress ?? "none"}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${tokens.alphaOnly}`, "content-type": "application/json" }, body: JSON.stringify({ model: "beta", messages: [{ role: "user", content: "x" }] }) });
      expect(other.status).toBe(403);
      expect(await other.json()).toMatchObject({ error: { type: "invalid_request_error", param: "model", code: "model_not_found" } });
    } finally {
      await c.close({ stopBackends: true });
    }
  });

  it("rejects out-of-range http settings naming the field", () => {
    expect(() => resolveCoordinatorConfig({ http: { bodyLimit: "2GiB" } })).toThrow(/http\.bodyLimit/);
    expect(() => resolveCoordinatorConfig({ http: { keepAliveTimeout: "1ms" } })).toThrow(/http\.keepAliveTimeout/);
    expect(() => resolveCoordinatorConfig({ http: { nope: 1 } })).toThrow(/http\.nope/);
    expect(() => resolveCoordinatorConfig({ httpListen: "8080" })).toThrow(/httpListen/);
    expect(resolveCoordinatorConfig({}).httpListen).toBeUndefined();
  });

  it("is off by default", async () => {
    const c = await startCoordinator(resolveCoordinatorConfig({ listen: "127.0.0.1:0", stateDir: join(dir, "s3"), embeddedAgent: false, recoveryWindow: "0s" }));
    try {
      expect(c.httpAddress).toBeUndefined();
    } finally {
      await c.close({ stopBackends: true });
    }
  });
});
