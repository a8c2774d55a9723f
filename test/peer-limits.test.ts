/**
 * What an unauthenticated peer can make a real coordinator process hold: an
 * upload without a token is refused on its headers (the body never buffered),
 * and idle sockets from one address (127.0.0.2) fill that address's own
 * quota on every listener — HTTP, the gRPC port and the data plane — while
 * another address (127.0.0.1) is still served.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Health } from "@warden/proto";
import { clientTlsOf, createClient, createH2Client, readTlsMaterial } from "@warden/grpc";
import { isWardenError } from "@warden/common";
import { resolveCoordinatorConfig } from "@warden/coordinator";
import { parseAgentLimits } from "../services/agent/src/agent-limits-config.js";
import { certsInit } from "../services/cli/src/certs.js";
import { writeTokensFile } from "./support/auth-tokens.js";
import { startAgentProcess, writeAgentConfig } from "./support/agent-process.js";
import { randomPortRange } from "./support/coordinator-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { idleFlood, procMemoryBytes, resetPeakMemory, unauthenticatedUpload } from "./support/socket-flood.js";

const mib = 1024 * 1024;
const otherPeer = "127.0.0.2";
/** The gRPC listeners' defaults (limits.maxConnectionsPerPeer, limits.handshakeTimeout), as the README's limits table gives them. */
const grpcPerPeerCap = 64;
const grpcHandshakeTimeoutMs = 10_000;

/** Polls `f` until it is true or `deadlineMs` passes; the last value either way. */
async function eventually(f: () => boolean, deadlineMs: number): Promise<boolean> {
  const end = Date.now() + deadlineMs;
  while (!f() && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
  return f();
}

let dir = "";

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-peer-limits-"));
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** The field an INVALID_ARGUMENT names, or what was thrown instead. */
function fieldOf(f: () => unknown): unknown {
  try {
    f();
  } catch (err) {
    return isWardenError(err) ? err.details["field"] : err;
  }
  return "accepted";
}

describe("connection limit settings", () => {
  it("have defaults, and a bad value is INVALID_ARGUMENT naming the field (coordinator http: and limits:, agent limits:)", () => {
    const c = resolveCoordinatorConfig({});
    expect(c.http).toMatchObject({ maxConnections: 1024, maxConnectionsPerPeer: 64, headersTimeoutMs: 30_000, handshakeTimeoutMs: 10_000 });
    expect(c.limits.peerCaps).toEqual({ maxConnectionsPerPeer: 64, maxConnections: 4096, handshakeTimeoutMs: 10_000, idleTimeoutMs: 300_000 });
    expect(resolveCoordinatorConfig({ http: { maxConnectionsPerPeer: 8, headersTimeout: "5s" }, limits: { maxConnectionsPerPeer: 4, idleConnectionTimeout: "30s" } })).toMatchObject({ http: { maxConnectionsPerPeer: 8, headersTimeoutMs: 5_000 }, limits: { peerCaps: { maxConnectionsPerPeer: 4, idleTimeoutMs: 30_000 } } });
    expect(fieldOf(() => resolveCoordinatorConfig({ http: { maxConnectionsPerPeer: 0 } }))).toBe("http.maxConnectionsPerPeer");
    expect(fieldOf(() => resolveCoordinatorConfig({ http: { headersTimeout: "2h" } }))).toBe("http.headersTimeout");
    expect(fieldOf(() => resolveCoordinatorConfig({ http: { headersTimeout: "2m", requestTimeout: "1m" } }))).toBe("http.headersTimeout");
    expect(resolveCoordinatorConfig({ http: { requestTimeout: "10s" } }).http.headersTimeoutMs).toBe(10_000);
    expect(fieldOf(() => resolveCoordinatorConfig({ http: { handshakeTimeout: "1ms" } }))).toBe("http.handshakeTimeout");
    expect(fieldOf(() => resolveCoordinatorConfig({ limits: { maxConnectionsPerPeer: 70_000 } }))).toBe("limits.maxConnectionsPerPeer");
    expect(fieldOf(() => resolveCoordinatorConfig({ limits: { handshakeTimeout: "soon" } }))).toBe("limits.handshakeTimeout");
    expect(parseAgentLimits({ maxConnections: 10 }).peerCaps.maxConnections).toBe(10);
    expect(fieldOf(() => parseAgentLimits({ idleConnectionTimeout: 0 }))).toBe("limits.idleConnectionTimeout");
    expect(fieldOf(() => parseAgentLimits({ maxConnectionsPerPeer: -1 }))).toBe("limits.maxConnectionsPerPeer");
  });
});

describe("HTTP listener: unauthenticated peers", () => {
  let p: CoordinatorProcess;
  let tokens: Record<"viewer", string>;
  let http = "";

  beforeAll(async () => {
    const t = await writeTokensFile(dir, { viewer: { role: "viewer" } });
    tokens = t.tokens;
    // maxConnections 256 (not 1 024): the flood below fills it with fewer sockets.
    p = await startCoordinatorProcess(join(dir, "http.yaml"), { listen: "127.0.0.1:0", httpListen: "127.0.0.1:0", stateDir: join(dir, "http-state"), embeddedAgent: false, recoveryWindow: 0, auth: { tokensFile: t.path }, http: { maxConnections: 256 } });
    http = p.httpAddress ?? "";
  }, 60_000);

  afterAll(async () => {
    await p.kill();
  });

  it("refuses an upload without a token on its headers: 401 to each, and the coordinator's memory does not grow with the bytes sent", async () => {
    const uploads = 12;
    const bodyBytes = 24 * mib;
    // The peak from here on, not the coordinator's start-up peak.
    resetPeakMemory(p.pid);
    const before = procMemoryBytes(p.pid, "VmRSS");
    // Half to a route, half to none: a request the not-found handler would answer is not read either.
    const outcomes = await Promise.all(Array.from({ length: uploads }, (_, i) => unauthenticatedUpload(http, i % 2 === 0 ? "/v1/embeddings" : "/v1/no-such-route", bodyBytes, 120_000)));
    // The peak resident size since start: whatever the uploads made the coordinator hold, however briefly.
    const growth = procMemoryBytes(p.pid, "VmHWM") - before;
    expect(outcomes.map((o) => o.status)).toEqual(Array.from({ length: uploads }, () => 401));
    // Buffering the bodies would hold at least what was sent (288 MiB here); a quarter of it is far above anything else.
    expect(growth, `resident memory grew ${String(Math.round(growth / mib))} MiB`).toBeLessThan((uploads * bodyBytes) / 4);
    // The dashboard's page is public (it then asks for a token); a dashboard call without one is refused in its own shape.
    expect((await fetch(`http://${http}/`)).status).toBe(200);
    // …asked for with no body: a public route with one needs a token like the rest (nothing unauthenticated is read).
    const withBody = await unauthenticatedUpload(http, "/", mib, 60_000, { method: "GET" });
    expect(withBody.status).toBe(401);
    const refused = await fetch(`http://${http}/api/dashboard/snapshot`, { method: "POST", body: "x".repeat(1024) });
    expect(refused.status).toBe(401);
    expect(refused.headers.get("connection")).toBe("close");
    expect(await refused.json()).toMatchObject({ error: { code: "unauthenticated" } });
  }, 180_000);

  it("a peer that ignores the 401 and keeps streaming is cut off", async () => {
    // A body of 1 TiB announced: before, the refusal (413) left the connection open and its bytes were read for up to http.requestTimeout (5 min).
    const o = await unauthenticatedUpload(http, "/v1/embeddings", 1024 * 1024 * mib, 60_000, { ignoreReply: true });
    expect(o.status).toBe(401);
    expect(o.closedByServer).toBe(true);
  }, 120_000);

  it("idle sockets from one address fill only that address's quota: a dashboard call from another is served", async () => {
    const flood = await idleFlood(http, otherPeer, 256 + 100);
    try {
      const r = await fetch(`http://${http}/api/dashboard/snapshot`, { headers: { authorization: `Bearer ${tokens.viewer}` }, signal: AbortSignal.timeout(30_000) });
      expect(r.status).toBe(200);
      // Past its quota the address's sockets were closed as they arrived.
      expect(await eventually(() => flood.open() <= 64, 30_000)).toBe(true);
    } finally {
      flood.destroy();
    }
  }, 120_000);
});

describe("gRPC listeners: idle and slow peers", () => {
  let p: CoordinatorProcess;
  let certs = "";
  let dataPlane = "";

  beforeAll(async () => {
    certs = join(dir, "certs");
    await certsInit({ out: certs, agents: ["gpu-1"] });
    p = await startCoordinatorProcess(join(dir, "grpc.yaml"), {
      listen: "127.0.0.1:0",
      inferenceListen: "127.0.0.1:0",
      stateDir: join(dir, "grpc-state"),
      embeddedAgent: false,
      recoveryWindow: 0,
      tls: { cert: join(certs, "coordinator.pem"), key: join(certs, "coordinator-key.pem"), ca: join(certs, "ca.pem") },
    });
    const line = p.logLines.find((l) => l["msg"] === "coordinator listening");
    const a = line?.["inferenceAddress"];
    dataPlane = typeof a === "string" ? a : "";
  }, 60_000);

  afterAll(async () => {
    await p.kill();
  });

  const tls = (): ReturnType<typeof clientTlsOf> => clientTlsOf(readTlsMaterial({ certFile: join(certs, "gpu-1.pem"), keyFile: join(certs, "gpu-1-key.pem"), caFile: join(certs, "ca.pem") }));

  it("the control-plane port closes one address's connections past its cap and those that never handshake; another address is served meanwhile", async () => {
    const cap = grpcPerPeerCap;
    const flood = await idleFlood(p.address, otherPeer, cap + 100);
    const client = createClient(Health, p.address, { tls: tls() });
    try {
      expect(await eventually(() => flood.open() <= cap, 30_000)).toBe(true);
      expect((await client.check({ service: "" }, { timeoutMs: 20_000 })).status).toBe(1);
      // Sockets that never start TLS are closed after limits.handshakeTimeout (10 s), not Node's 2 minutes.
      expect(await eventually(() => flood.open() === 0, grpcHandshakeTimeoutMs + 40_000)).toBe(true);
    } finally {
      client.close();
      flood.destroy();
    }
  }, 120_000);

  it("the agent's port does the same", async () => {
    const cfg = join(dir, "agent.yaml");
    await writeAgentConfig(cfg, { nodeId: "gpu-1", stateDir: join(dir, "agent-state"), ports: randomPortRange(4), nvidiaSmi: "", catalog: { "backend-sim": { builtin: "backend-sim" } }, tls: { cert: join(certs, "gpu-1.pem"), key: join(certs, "gpu-1-key.pem"), ca: join(certs, "ca.pem") } });
    const agent = await startAgentProcess(cfg, [], 60_000);
    const cap = grpcPerPeerCap;
    const flood = await idleFlood(agent.address, otherPeer, cap + 100);
    const client = createClient(Health, agent.address, { tls: { ...tls(), serverName: "localhost" } });
    try {
      expect(await eventually(() => flood.open() <= cap, 30_000)).toBe(true);
      expect((await client.check({ service: "" }, { timeoutMs: 20_000 })).status).toBe(1);
      expect(await eventually(() => flood.open() === 0, grpcHandshakeTimeoutMs + 40_000)).toBe(true);
    } finally {
      client.close();
      flood.destroy();
      await agent.terminate();
    }
  }, 150_000);

  it("the data-plane port does the same", async () => {
    const cap = grpcPerPeerCap;
    const flood = await idleFlood(dataPlane, otherPeer, cap + 100);
    const client = createH2Client(Health, dataPlane, { tls: tls() });
    try {
      expect(await eventually(() => flood.open() <= cap, 30_000)).toBe(true);
      expect((await client.check({ service: "" }, { timeoutMs: 20_000 })).status).toBe(1);
      expect(await eventually(() => flood.open() === 0, grpcHandshakeTimeoutMs + 40_000)).toBe(true);
    } finally {
      client.close();
      flood.destroy();
    }
  }, 120_000);
});
