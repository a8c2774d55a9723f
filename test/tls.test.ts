/**
 * Transport security over real gRPC on loopback, with certificates made by
 * `warden certs` (openssl) once for the file: mutual TLS between coordinator
 * and agents (acceptance, no certificate, another CA's certificate), a
 * certificate bound to its node id, TLS on the data plane and the admin
 * CLI's client, the plaintext-on-a-non-loopback-address refusal, and a
 * certificate reload on SIGHUP that keeps the listener.
 */
import { copyFile, mkdir, mkdtemp, rm } from "node:fs/promises";
import { X509Certificate } from "node:crypto";
import { connect as tlsConnect, createServer as createTlsServer, type Server as TlsServer } from "node:tls";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { AdminService, AgentService, Health, NodeService } from "@warden/proto";
import { GrpcServer, LeanGrpcServer, clientTlsOf, createClient, createH2Client, readTlsMaterial, type ClientTls } from "@warden/grpc";
import { resolveCoordinatorConfig, startCoordinator, type Coordinator } from "@warden/coordinator";
import { certsInit, certsIssue } from "../services/cli/src/certs.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { startAgentProcess, writeAgentConfig } from "./support/agent-process.js";
import { randomPortRange, simModel, startTestCoordinator } from "./support/coordinator-harness.js";

let dir = "";
let certs = "";
let otherCa = "";
const pem = (d: string, name: string): { certFile: string; keyFile: string; caFile: string } => ({ certFile: join(d, `${name}.pem`), keyFile: join(d, `${name}-key.pem`), caFile: join(d, "ca.pem") });
const clientOf = (d: string, name: string): ClientTls => clientTlsOf(readTlsMaterial(pem(d, name)));
const caOnly = (): ClientTls => ({ ca: readTlsMaterial(pem(certs, "coordinator")).ca });

async function failure(p: Promise<unknown>): Promise<WardenError> {
  try {
    await p;
  } catch (err) {
    return WardenError.from(err);
  }
  throw new Error("expected the call to fail");
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-tls-"));
  certs = join(dir, "certs");
  otherCa = join(dir, "other");
  await certsInit({ out: certs, agents: ["gpu-1"] });
  await certsIssue({ out: certs, kind: "coordinator", name: "coordinator-next" });
  // A second CA issuing a certificate for the same node id: signed by the wrong authority.
  await certsInit({ out: otherCa, agents: ["gpu-1"] });
}, 60_000);

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Where gpu-1 registers: a TLS listener serving gpu-1's certificate, as its agent would (Register checks the address serves it). */
let gpu1Address = "";
const registration = (nodeId: string) => ({ nodeId, address: gpu1Address, bootEpoch: 1n, version: "test" });

describe("mutual TLS between coordinator and agents", () => {
  let c: Coordinator;
  let gpu1Listener: TlsServer | undefined;
  beforeAll(async () => {
    const own = readTlsMaterial(pem(certs, "gpu-1"));
    const listener = createTlsServer({ cert: own.cert, key: own.key, ...(own.ca === undefined ? {} : { ca: own.ca }), requestCert: true, ALPNProtocols: ["h2"] }, (s) => s.destroy());
    gpu1Listener = listener;
    await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
    gpu1Address = `127.0.0.1:${String((listener.address() as AddressInfo).port)}`;
    c = await startCoordinator(resolveCoordinatorConfig({ listen: "127.0.0.1:0", inferenceListen: "127.0.0.1:0", stateDir: join(dir, "state"), embeddedAgent: false, recoveryWindow: 0, tls: { cert: pem(certs, "coordinator").certFile, key: pem(certs, "coordinator").keyFile, ca: pem(certs, "coordinator").caFile } }));
  }, 60_000);
  afterAll(async () => {
    await c.close({ stopBackends: false });
    gpu1Listener?.close();
  });

  it("accepts an agent certificate from the configured CA for its own node id", async () => {
    const nc = createClient(NodeService, c.address, { tls: clientOf(certs, "gpu-1") });
    try {
      const r = await nc.register(registration("gpu-1"), { timeoutMs: 20_000 });
      expect(r.heartbeatIntervalMs).toBeGreaterThan(0);
      const hb = await nc.heartbeat({ nodeId: "gpu-1", bootEpoch: 1n, sequence: 1n }, { timeoutMs: 20_000 });
      expect(hb.registerRequired).toBe(false);
      expect(c.nodes.get("gpu-1")?.address).toBe(gpu1Address);
    } finally {
      nc.close();
    }
  });

  it("refuses a client with no certificate, and one signed by another CA", async () => {
    const none = createClient(NodeService, c.address, { tls: caOnly() });
    const foreign = createClient(NodeService, c.address, { tls: { ...clientOf(otherCa, "gpu-1"), ca: caOnly().ca } });
    const good = createClient(NodeService, c.address, { tls: clientOf(certs, "gpu-1") });
    try {
      // The same listener takes the CA's own certificate: the refusals below are the certificates'.
      await good.heartbeat({ nodeId: "gpu-1", bootEpoch: 1n, sequence: 2n }, { timeoutMs: 20_000 });
      expect((await failure(none.register(registration("gpu-9"), { timeoutMs: 20_000 }))).code).toBe(Code.Unavailable);
      expect((await failure(foreign.register(registration("gpu-1b"), { timeoutMs: 20_000 }))).code).toBe(Code.Unavailable);
      expect(c.nodes.get("gpu-9")).toBeUndefined();
      expect(c.nodes.get("gpu-1b")).toBeUndefined();
    } finally {
      none.close();
      foreign.close();
      good.close();
    }
  });

  it("refuses a plaintext client", async () => {
    const plain = createClient(NodeService, c.address);
    try {
      expect((await failure(plain.register(registration("gpu-8"), { timeoutMs: 20_000 }))).code).toBe(Code.Unavailable);
    } finally {
      plain.close();
    }
  });

  it("refuses Register and Heartbeat for a node id other than the certificate's, and from a certificate that names no node", async () => {
    const nc = createClient(NodeService, c.address, { tls: clientOf(certs, "gpu-1") });
    const admin = createClient(NodeService, c.address, { tls: clientOf(certs, "admin") });
    try {
      const reg = await failure(nc.register(registration("gpu-2"), { timeoutMs: 20_000 }));
      expect(reg.code).toBe(Code.PermissionDenied);
      expect(reg.message).toMatch(/node_id: "gpu-2" refused: its certificate is issued to node "gpu-1"/);
      expect(reg.details["field"]).toBe("node_id");
      const hb = await failure(nc.heartbeat({ nodeId: "gpu-2", bootEpoch: 1n, sequence: 1n }, { timeoutMs: 20_000 }));
      expect(hb.code).toBe(Code.PermissionDenied);
      const byAdmin = await failure(admin.register(registration("admin"), { timeoutMs: 20_000 }));
      expect(byAdmin.code).toBe(Code.PermissionDenied);
      expect(byAdmin.message).toMatch(/names no node/);
      expect(c.nodes.get("gpu-2")).toBeUndefined();
      expect(c.nodes.get("admin")).toBeUndefined();
    } finally {
      nc.close();
      admin.close();
    }
  });

  it("answers a HeartbeatStream of the certificate's node, and refuses one naming another node PERMISSION_DENIED naming node_id", async () => {
    const nc = createClient(NodeService, c.address, { tls: clientOf(certs, "gpu-1") });
    // Auth is off here: nothing but the certificate binds a stream's first message to a node.
    const stream = async (nodeId: string): Promise<boolean[]> => {
      const answers: boolean[] = [];
      const requests = async function* () {
        yield { nodeId, bootEpoch: 1n, sequence: 10n };
      };
      for await (const a of nc.heartbeatStream(requests(), { timeoutMs: 20_000 })) answers.push(a.registerRequired);
      return answers;
    };
    try {
      await nc.register(registration("gpu-1"), { timeoutMs: 20_000 });
      expect(await stream("gpu-1")).toEqual([false]);
      const refused = await failure(stream("gpu-2"));
      expect(refused.code).toBe(Code.PermissionDenied);
      expect(refused.message).toMatch(/node_id: "gpu-2" refused: its certificate is issued to node "gpu-1"/);
      expect(refused.details["field"]).toBe("node_id");
      expect(c.nodes.get("gpu-2")).toBeUndefined();
    } finally {
      nc.close();
    }
  });

  it("serves the admin CLI's lean client over mutual TLS, and the data plane over TLS", async () => {
    const cli = createH2Client(AdminService, c.address, { tls: clientOf(certs, "admin") });
    const dataPlane = createH2Client(Health, c.inferenceAddress ?? "", { tls: caOnly() });
    const plainDataPlane = createH2Client(Health, c.inferenceAddress ?? "");
    const noCert = createH2Client(AdminService, c.address, { tls: caOnly() });
    try {
      expect((await cli.listNodes({}, { timeoutMs: 20_000 })).nodes.map((n) => n.nodeId)).toContain("gpu-1");
      expect((await dataPlane.check({ service: "warden.v1.InferenceService" }, { timeoutMs: 20_000 })).status).toBe(1);
      expect((await failure(plainDataPlane.check({ service: "" }, { timeoutMs: 20_000 }))).code).toBe(Code.Unavailable);
      expect((await failure(noCert.listNodes({}, { timeoutMs: 20_000 }))).code).toBe(Code.Unavailable);
    } finally {
      cli.close();
      dataPlane.close();
      plainDataPlane.close();
      noCert.close();
    }
  });
});

describe("an agent under mutual TLS", () => {
  it("takes commands from the coordinator's certificate only: another node's certificate (same CA) is PERMISSION_DENIED", async () => {
    const cfg = join(dir, "mtls-agent.yaml");
    const own = pem(certs, "gpu-1");
    await writeAgentConfig(cfg, { nodeId: "gpu-1", stateDir: join(dir, "mtls-agent-state"), ports: randomPortRange(4), nvidiaSmi: "", catalog: { "backend-sim": { builtin: "backend-sim" } }, tls: { cert: own.certFile, key: own.keyFile, ca: own.caFile } });
    const agent = await startAgentProcess(cfg, [], 60_000);
    // gpu-1's own certificate stands for any node's: every agent's comes from this CA.
    const asNode = createClient(AgentService, agent.address, { tls: { ...clientOf(certs, "gpu-1"), serverName: "localhost" } });
    const asCoordinator = createClient(AgentService, agent.address, { tls: { ...clientOf(certs, "coordinator"), serverName: "localhost" } });
    try {
      expect((await asCoordinator.listBackends({}, { timeoutMs: 20_000 })).backends).toEqual([]);
      const e = await failure(asNode.listBackends({}, { timeoutMs: 20_000 }));
      expect(e.code).toBe(Code.PermissionDenied);
      expect(e.rawMessage).toMatch(/issued to node "gpu-1"; only the coordinator may command an agent/);
      const stop = await failure(asNode.stopBackend({ address: "127.0.0.1:1", incarnation: "01ARZ3NDEKTSV4RRFFQ69G5FAV", force: true }, { timeoutMs: 20_000 }));
      expect(stop.code).toBe(Code.PermissionDenied);
    } finally {
      asNode.close();
      asCoordinator.close();
      await agent.terminate();
    }
  }, 90_000);
});

describe("plaintext on a non-loopback address", () => {
  const refused = /refusing to listen on .* in plaintext: it is not a loopback address.*insecure: true \(--insecure\)/;

  it("is refused by both servers unless insecure is set, and allowed on loopback", async () => {
    for (const addr of ["0.0.0.0:0", "[::]:0", "10.1.2.3:0"]) {
      const e = await failure(new GrpcServer().listen(addr));
      expect(e.code).toBe(Code.FailedPrecondition);
      expect(e.message).toMatch(refused);
      expect((await failure(new LeanGrpcServer().listen(addr))).message).toMatch(refused);
    }
    const open = new GrpcServer({ insecure: true });
    await open.listen("0.0.0.0:0");
    await open.shutdown(100);
    const lean = new LeanGrpcServer({ insecure: true });
    await lean.listen("0.0.0.0:0");
    await lean.shutdown(100);
    const loop = new GrpcServer();
    await loop.listen("127.0.0.1:0");
    await loop.shutdown(100);
  });

  it("is refused by the coordinator's config, and allowed with insecure: true", async () => {
    const e = await failure(startCoordinator(resolveCoordinatorConfig({ listen: "0.0.0.0:0", stateDir: join(dir, "plain"), embeddedAgent: false })));
    expect(e.message).toMatch(refused);
    const c = await startCoordinator(resolveCoordinatorConfig({ listen: "0.0.0.0:0", stateDir: join(dir, "plain2"), embeddedAgent: false, insecure: true }));
    await c.close({ stopBackends: false });
  }, 60_000);

  it("is refused by the agent process, which says how to fix it", async () => {
    const cfg = join(dir, "agent.yaml");
    await writeAgentConfig(cfg, { nodeId: "plain-agent", stateDir: join(dir, "agent-state"), ports: randomPortRange(4), nvidiaSmi: "", catalog: { "backend-sim": { builtin: "backend-sim" } } });
    const e = await failure(startAgentProcess(cfg, ["--listen", "0.0.0.0:0"], 60_000));
    expect(e.message).toMatch(/refusing to listen on 0\.0\.0\.0:0 in plaintext.*--insecure/);
  }, 90_000);
});

/** The serial number of the certificate a server presents to a new handshake. */
function servedSerial(address: string): Promise<string> {
  const colon = address.lastIndexOf(":");
  return new Promise((resolve, reject) => {
    const s = tlsConnect({ host: address.slice(0, colon), port: Number(address.slice(colon + 1)), ca: caOnly().ca, ALPNProtocols: ["h2"] }, () => {
      resolve(s.getPeerCertificate().serialNumber);
      s.end();
    });
    s.on("error", reject);
  });
}

describe("certificate reload on SIGHUP", () => {
  let p: CoordinatorProcess | undefined;
  afterAll(async () => {
    await p?.kill();
  });

  it("gives new handshakes the new certificate, keeping the listener and open connections", async () => {
    const live = join(dir, "live");
    await mkdir(live, { recursive: true });
    await copyFile(pem(certs, "coordinator").certFile, join(live, "cert.pem"));
    await copyFile(pem(certs, "coordinator").keyFile, join(live, "key.pem"));
    p = await startCoordinatorProcess(join(dir, "coord.yaml"), {
      listen: "127.0.0.1:0",
      stateDir: join(dir, "proc-state"),
      embeddedAgent: false,
      recoveryWindow: 0,
      tls: { cert: join(live, "cert.pem"), key: join(live, "key.pem") },
    });
    const before = await servedSerial(p.address);
    const next = readTlsMaterial(pem(certs, "coordinator-next"));
    expect(before).not.toBe("");
    // A connection opened before the reload, to check it survives it.
    const open = createH2Client(Health, p.address, { tls: caOnly() });
    expect((await open.check({ service: "" }, { timeoutMs: 20_000 })).status).toBe(1);
    await copyFile(pem(certs, "coordinator-next").certFile, join(live, "cert.pem"));
    await copyFile(pem(certs, "coordinator-next").keyFile, join(live, "key.pem"));
    p.child.kill("SIGHUP");
    const want = new X509Certificate(next.cert).serialNumber;
    const deadline = Date.now() + 30_000;
    let served = before;
    while (served !== want && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      served = await servedSerial(p.address);
    }
    expect(served).toBe(want);
    expect((await open.check({ service: "" }, { timeoutMs: 20_000 })).status).toBe(1);
    open.close();
    expect(p.child.exitCode).toBeNull();
  }, 120_000);
});

describe("coordinator to a backend that serves TLS", () => {
  const backendCatalog = (): Record<string, unknown> => ({
    "backend-sim": { builtin: "backend-sim", env: { BACKEND_SIM_TLS_CERT: pem(certs, "gpu-1").certFile, BACKEND_SIM_TLS_KEY: pem(certs, "gpu-1").keyFile }, tls: { ca: pem(certs, "gpu-1").caFile } },
  });

  it("routes Predict over TLS to a backend of a catalog entry listed in backendTls", async () => {
    const t = await startTestCoordinator({ models: [simModel("m", { knobs: { predict_tokens: 1 } })], agent: { catalog: backendCatalog() }, extra: { backendTls: { ca: pem(certs, "gpu-1").caFile, backends: ["backend-sim"] } } });
    try {
      const r = await t.inference.predict({ model: "m", options: { Prompt: "hi" } }, { timeoutMs: 60_000 });
      expect(r.reply?.message.length).toBeGreaterThan(0);
      // The backend refuses plaintext: the coordinator's hop really is TLS.
      const address = (await t.admin.listModels({})).instances[0]?.address ?? "";
      const plain = createClient(Health, address);
      expect((await failure(plain.check({ service: "" }, { timeoutMs: 20_000 }))).code).toBe(Code.Unavailable);
      plain.close();
    } finally {
      await t.close();
    }
  }, 120_000);

  it("does not reach that backend without backendTls (plaintext to a TLS backend fails)", async () => {
    const t = await startTestCoordinator({ models: [simModel("m", { knobs: { predict_tokens: 1 } })], agent: { catalog: backendCatalog() } });
    try {
      expect((await failure(t.inference.predict({ model: "m", options: { Prompt: "hi" } }, { timeoutMs: 60_000 }))).code).toBe(Code.Unavailable);
    } finally {
      await t.close();
    }
  }, 120_000);
});

describe("the HTTP listener (OpenAI API) over TLS", () => {
  it("serves HTTPS with the coordinator's certificate when tls is configured, and no plaintext", async () => {
    const { get } = await import("node:https");
    const { get: plainGet } = await import("node:http");
    const c = await startCoordinator(resolveCoordinatorConfig({ listen: "127.0.0.1:0", httpListen: "127.0.0.1:0", stateDir: join(dir, "state-http"), embeddedAgent: false, recoveryWindow: 0, tls: { cert: pem(certs, "coordinator").certFile, key: pem(certs, "coordinator").keyFile } }));
    try {
      const url = `https://${c.httpAddress ?? "none"}/v1/models`;
      const ca = readTlsMaterial(pem(certs, "coordinator")).ca;
      const status = await new Promise<number | undefined>((resolve, reject) => {
        get(url, { ca, servername: "localhost" }, (res) => {
          res.resume();
          resolve(res.statusCode);
        }).on("error", reject);
      });
      expect(status).toBe(200);
      const plain = await new Promise<string>((resolve) => {
        plainGet(`http://${c.httpAddress ?? "none"}/v1/models`, (res) => {
          res.resume();
          resolve(`status ${String(res.statusCode)}`);
        }).on("error", (e) => {
          resolve(e.message);
        });
      });
      expect(plain).not.toBe("status 200");
    } finally {
      await c.close({ stopBackends: true });
    }
  });
});
