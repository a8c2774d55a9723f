/**
 * The HTTP listener's hygiene, against real coordinator processes over
 * loopback, every request written byte for byte: a malformed request is a
 * 4xx naming what is wrong (never a 500) and changes nothing; every response
 * carries the security headers (HSTS under TLS); with auth off, a request
 * whose Host is not a loopback name, the listen host or `http.allowedHosts`
 * (a page that rebound its DNS name to this machine) is refused.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AdminService } from "@warden/proto";
import { createClient, type Client } from "@warden/grpc";
import { certsInit } from "../services/cli/src/certs.js";
import { simModel } from "./support/coordinator-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { rawHttp, type RawHttpAnswer, type RawHttpRequest } from "./support/raw-http.js";
import { withToken, writeTokensFile } from "./support/auth-tokens.js";

let dir = "";
let coord: CoordinatorProcess;
let admin: Client<typeof AdminService>;
let http = "";

const send = (r: RawHttpRequest): Promise<RawHttpAnswer> => rawHttp(http, r, { wholeBody: !r.path.endsWith("/stream") });
const json = (method: string, path: string, body: unknown): RawHttpRequest => ({ method, path, headers: { "content-type": "application/json" }, body: typeof body === "string" ? body : JSON.stringify(body) });
const multipart = (text: string, boundary = "XyZ"): RawHttpRequest => ({ method: "POST", path: "/v1/audio/transcriptions", headers: { "content-type": `multipart/form-data; boundary=${boundary}` }, body: text });

async function clusterState(): Promise<unknown> {
  const nodes = (await admin.listNodes({})).nodes.map((n) => ({ id: n.nodeId, state: n.state, draining: n.draining }));
  const models = (await admin.listModels({})).instances.map((i) => ({ model: i.model, node: i.nodeId, state: i.state }));
  return { nodes, models, policy: await admin.getPolicy({}) };
}

/** Log lines of calls answered 5xx (http-server.ts logs each at error). */
const serverErrors = (): unknown[] => coord.logLines.filter((l) => l["msg"] === "http call failed");

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-http-hygiene-"));
  coord = await startCoordinatorProcess(join(dir, "coordinator.yaml"), {
    listen: "127.0.0.1:0",
    httpListen: "127.0.0.1:0",
    stateDir: join(dir, "state"),
    embeddedAgent: false,
    recoveryWindow: "0s",
    http: { bodyLimit: "64KiB", allowedHosts: ["warden.example.test"] },
    models: [simModel("m")],
  });
  http = coord.httpAddress ?? "";
  admin = createClient(AdminService, coord.address);
}, 90_000);

afterAll(async () => {
  await coord.kill();
  await rm(dir, { recursive: true, force: true });
});

describe("HTTP client errors (auth off, a real coordinator process)", () => {
  it("answers every malformed request 4xx naming what is wrong, logs no server error and changes nothing", async () => {
    const before = await clusterState();
    const big = "x".repeat(70 * 1024);
    const truncated = `--XyZ\r\nContent-Disposition: form-data; name="model"\r\n\r\nm\r\n--XyZ\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\nRIFF1234`;
    const cases: [string, RawHttpRequest, number, string | undefined][] = [
      ["invalid JSON on a dashboard action", json("POST", "/api/dashboard/actions/load", "{bad"), 400, "body"],
      ["an over-size dashboard action", json("POST", "/api/dashboard/actions/unload", { model: "m".repeat(5000) }), 413, "body"],
      ["a form-encoded dashboard action", { method: "POST", path: "/api/dashboard/actions/drain", headers: { "content-type": "application/x-www-form-urlencoded" }, body: "nodeId=x" }, 415, "content-type"],
      ["an XML dashboard action", { method: "POST", path: "/api/dashboard/actions/undrain", headers: { "content-type": "application/xml" }, body: "<a/>" }, 415, "content-type"],
      ["a form-encoded chat completion", { method: "POST", path: "/v1/chat/completions", headers: { "content-type": "application/x-www-form-urlencoded" }, body: "model=m" }, 415, "content-type"],
      ["invalid JSON on embeddings", json("POST", "/v1/embeddings", '{"model":'), 400, "body"],
      ["a chat completion past http.bodyLimit", json("POST", "/v1/chat/completions", { model: "m", messages: [{ role: "user", content: big }] }), 413, "body"],
      ["a truncated multipart upload", multipart(truncated), 400, "body"],
      ["a multipart upload without a boundary", { ...multipart("--XyZ\r\n"), headers: { "content-type": "multipart/form-data" } }, 400, "body"],
      ["a multipart upload that is not multipart inside", multipart("hello"), 400, undefined],
      ["a multipart file past http.bodyLimit", multipart(`--XyZ\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n${big}\r\n--XyZ--\r\n`), 413, "file"],
      ["a wrong type", json("POST", "/v1/images/generations", { model: 5, prompt: "x" }), 400, "model"],
      ["a bad method", { method: "DELETE", path: "/v1/models" }, 404, "url"],
      ["a malformed URL", { method: "GET", path: "/v1/%zz" }, 400, undefined],
      // Answered, not held open with a stream slot taken.
      ["HEAD of the dashboard's event stream", { method: "HEAD", path: "/api/dashboard/stream" }, 404, undefined],
    ];
    const got: Record<string, unknown>[] = [];
    for (const [what, req, , field] of cases) {
      const a = await send(req);
      let body: { error?: { param?: unknown; field?: unknown } } = {};
      try {
        body = JSON.parse(a.bodyStart) as typeof body;
      } catch {
        // a framework 400 (bad URL) may be plain; the status is what counts there
      }
      got.push({ what, status: a.status, ...(field === undefined ? {} : { field: body.error?.param ?? body.error?.field }) });
    }
    expect(got).toEqual(cases.map(([what, , status, field]) => ({ what, status, ...(field === undefined ? {} : { field }) })));
    expect(serverErrors()).toEqual([]);
    expect(await clusterState()).toEqual(before);
  });
});

describe("HTTP security headers and Host (auth off)", () => {
  const expectHardened = (a: RawHttpAnswer, what: string): void => {
    expect({ what, h: a.headers }).toMatchObject({
      what,
      h: { "x-content-type-options": "nosniff", "x-frame-options": "DENY", "referrer-policy": "no-referrer", "content-security-policy": expect.stringContaining("frame-ancestors 'none'") as unknown },
    });
    expect({ what, hsts: a.headers["strict-transport-security"] }).toEqual({ what, hsts: undefined });
  };

  it("puts the security headers on every route: the API, the dashboard, its stream, 404s and errors", async () => {
    const reqs: [string, RawHttpRequest][] = [
      ["/v1/models", { method: "GET", path: "/v1/models" }],
      ["a 404", { method: "GET", path: "/nowhere" }],
      ["an OpenAI 400", json("POST", "/v1/chat/completions", "{")],
      ["the dashboard page", { method: "GET", path: "/" }],
      ["the dashboard script", { method: "GET", path: "/dashboard/app.js" }],
      ["the dashboard snapshot", { method: "GET", path: "/api/dashboard/snapshot" }],
      ["the dashboard stream", { method: "GET", path: "/api/dashboard/stream" }],
      ["a dashboard 400", json("POST", "/api/dashboard/actions/load", "{")],
      ["GET /ha/leader", { method: "GET", path: "/ha/leader" }],
      ["a refused Host", { method: "GET", path: "/v1/models", headers: { host: "evil.example" } }],
    ];
    for (const [what, r] of reqs) expectHardened(await send(r), what);
    // The page's own policy: scripts and styles from itself only.
    expect((await send({ method: "GET", path: "/" })).headers["content-security-policy"]).toContain("script-src 'self'");
  });

  it("refuses a request naming another host 421, before any route runs, and changes nothing", async () => {
    const before = await clusterState();
    const port = http.slice(http.lastIndexOf(":") + 1);
    for (const host of ["evil.example", `evil.example:${port}`, "127.0.0.1.evil.example", "localhost.evil.example", `[::2]:${port}`, "warden.example.test.evil"]) {
      for (const r of [{ method: "GET", path: "/" }, { method: "GET", path: "/v1/models" }, { method: "GET", path: "/api/dashboard/snapshot" }, json("POST", "/api/dashboard/actions/drain", { nodeId: "n1" })]) {
        const a = await send({ ...r, headers: { ...r.headers, host } });
        expect({ host, path: r.path, status: a.status }).toEqual({ host, path: r.path, status: 421 });
        expect(a.bodyStart).toContain("http.allowedHosts");
      }
    }
    for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, "localhost", `warden.example.test:${port}`, "WARDEN.example.test"]) {
      const a = await send({ method: "GET", path: "/v1/models", headers: { host } });
      expect({ host, status: a.status }).toEqual({ host, status: 200 });
    }
    // No Host: HTTP/1.1 requires one (400, with the headers); an HTTP/1.0 health check without one is no browser.
    const noHost = await send({ method: "GET", path: "/v1/models", headers: { host: null } });
    expect(noHost.status).toBe(400);
    expectHardened(noHost, "no Host");
    expect((await send({ method: "GET", path: "/ha/leader", headers: { host: null }, version: "1.0" })).status).toBe(200);
    expect(await clusterState()).toEqual(before);
  });
});

describe("HTTP under TLS with auth on", () => {
  let tlsCoord: CoordinatorProcess;
  let token = "";
  beforeAll(async () => {
    const certs = join(dir, "certs");
    await certsInit({ out: certs, agents: [] });
    const t = await writeTokensFile(dir, { inference: { role: "inference" } });
    token = t.tokens.inference;
    tlsCoord = await startCoordinatorProcess(join(dir, "tls.yaml"), {
      listen: "127.0.0.1:0",
      httpListen: "127.0.0.1:0",
      stateDir: join(dir, "state-tls"),
      embeddedAgent: false,
      recoveryWindow: "0s",
      auth: { tokensFile: t.path },
      tls: { cert: join(certs, "coordinator.pem"), key: join(certs, "coordinator-key.pem"), ca: join(certs, "ca.pem") },
      models: [simModel("m")],
    });
  }, 120_000);
  afterAll(async () => {
    await tlsCoord.kill();
  });

  it("adds HSTS; the Host is not what guards it (a browser never sends the token by itself)", async () => {
    const addr = tlsCoord.httpAddress ?? "";
    const authz = withToken(token).headers ?? {};
    const ok = await rawHttp(addr, { method: "GET", path: "/v1/models", headers: { ...authz, host: "warden.elsewhere.example" } }, { tls: true });
    expect(ok.status).toBe(200);
    expect(ok.headers["strict-transport-security"]).toMatch(/^max-age=\d+/);
    expect(ok.headers["x-content-type-options"]).toBe("nosniff");
    const none = await rawHttp(addr, { method: "GET", path: "/", headers: { host: "warden.elsewhere.example" } }, { tls: true });
    expect(none.headers["strict-transport-security"]).toMatch(/^max-age=\d+/);
    expect((await rawHttp(addr, { method: "GET", path: "/api/dashboard/snapshot", headers: { host: "evil.example" } }, { tls: true })).status).toBe(401);
  });
});
