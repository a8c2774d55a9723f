/**
 * An agent under mutual TLS obeys the coordinator only. Every certificate
 * here comes from `warden certs` and one CA, as in a real deployment: a
 * coordinator process and an agent process (real gRPC over loopback), an
 * operator's client certificates (admin, viewer), another node's
 * certificate, and a coordinator certificate made the old way (no
 * coordinator identity). Only the coordinator's certificate commands the
 * agent; the others are PERMISSION_DENIED and nothing starts or stops (the
 * process table says so); every command the agent runs is logged with who
 * asked, and the coordinator's audit events of an operator's load and unload
 * name the operator.
 */
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { AdminService, AgentService } from "@warden/proto";
import { clientTlsOf, createClient, identityOfCertificate, readTlsMaterial, type ClientTls } from "@warden/grpc";
import { X509Certificate } from "node:crypto";
import { certsInit, certsIssue } from "../services/cli/src/certs.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { newIncarnation, uniqueTag } from "./support/agent-harness.js";
import { simModel, until } from "./support/coordinator-harness.js";
import { withToken, writeTokensFile } from "./support/auth-tokens.js";

const run = promisify(execFile);
let dir = "";
let certs = "";
const tag = uniqueTag("coordinator-only");
const files = (name: string): { certFile: string; keyFile: string; caFile: string } => ({ certFile: join(certs, `${name}.pem`), keyFile: join(certs, `${name}-key.pem`), caFile: join(certs, "ca.pem") });
const tlsAs = (name: string): ClientTls => ({ ...clientTlsOf(readTlsMaterial(files(name))), serverName: "localhost" });

async function failure(p: Promise<unknown>): Promise<WardenError> {
  try {
    await p;
  } catch (err) {
    return WardenError.from(err);
  }
  throw new Error("expected the call to fail");
}

/**
 * A certificate from the same CA that `warden certs` does not make: by
 * default a coordinator certificate as it was made before coordinators
 * carried their identity (same subject, no URI SAN).
 */
async function mintCert(name: string, san = "DNS:localhost,IP:127.0.0.1,IP:::1"): Promise<void> {
  const key = join(certs, `${name}-key.pem`);
  const csr = join(dir, `${name}.csr`);
  const ext = join(dir, `${name}.cnf`);
  await run("openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key]);
  await writeFile(ext, `basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=${san}\n`);
  await run("openssl", ["req", "-new", "-key", key, "-subj", `/O=Warden/OU=coordinator/CN=${name}`, "-out", csr]);
  await run("openssl", ["x509", "-req", "-in", csr, "-CA", join(certs, "ca.pem"), "-CAkey", join(certs, "ca-key.pem"), "-set_serial", `0x${Buffer.from(name).toString("hex")}`, "-days", "30", "-sha256", "-extfile", ext, "-out", join(certs, `${name}.pem`)]);
}

/** The agent's JSON log lines with message `msg`. */
function logged(agent: RemoteAgent, msg: string): Record<string, unknown>[] {
  return agent.proc.lines.flatMap((l) => {
    try {
      const o = JSON.parse(l) as Record<string, unknown>;
      return o["msg"] === msg ? [o] : [];
    } catch {
      return [];
    }
  });
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-coordinator-only-"));
  certs = join(dir, "certs");
  await certsInit({ out: certs, agents: ["gpu-1", "gpu-2"] });
  await certsIssue({ out: certs, kind: "client", name: "viewer" });
  await mintCert("coordinator-old");
  // Names the coordinator and a node: it is neither's coordinator.
  await mintCert("hybrid", "DNS:localhost,URI:urn:warden:coordinator,URI:urn:warden:node:gpu-1");
}, 60_000);

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("warden certs", () => {
  it("gives the coordinator's certificate the coordinator identity, and no agent or client certificate", () => {
    const id = (name: string) => identityOfCertificate(new X509Certificate(readTlsMaterial(files(name)).cert).toLegacyObject());
    expect(id("coordinator").isCoordinator).toBe(true);
    expect(id("coordinator").uris).toContain("urn:warden:coordinator");
    expect(id("gpu-1").isCoordinator).toBe(false);
    expect(id("admin").isCoordinator).toBe(false);
    expect(id("viewer").isCoordinator).toBe(false);
    expect(id("coordinator-old").isCoordinator).toBe(false);
    expect(id("hybrid").isCoordinator).toBe(false);
  });
});

describe("an agent under mutual TLS obeys the coordinator only", () => {
  let coordinator: CoordinatorProcess;
  let agent: RemoteAgent;
  let admin: ReturnType<typeof createClient<typeof AdminService>>;
  /** The operator as the coordinator names it: the token's name and role, and the client certificate's CN. */
  const operator = 'token "ops" (operator), certificate CN "admin"';

  beforeAll(async () => {
    const c = files("coordinator");
    // A secured deployment: mutual TLS and tokens (an operator's, and gpu-2's node token).
    const t = await writeTokensFile(dir, { ops: { role: "operator" }, gpu2: { role: "node", node: "gpu-2" } });
    const nodeTokenFile = join(dir, "gpu-2.token");
    await writeFile(nodeTokenFile, t.tokens.gpu2, { mode: 0o600 });
    coordinator = await startCoordinatorProcess(join(dir, "coordinator.yaml"), {
      listen: "127.0.0.1:0",
      stateDir: join(dir, "coordinator-state"),
      embeddedAgent: false,
      recoveryWindow: 0,
      tls: { cert: c.certFile, key: c.keyFile, ca: c.caFile },
      auth: { tokensFile: t.path },
      models: [simModel("m")],
    });
    const own = files("gpu-2");
    agent = await startRemoteAgent({ coordinator: coordinator.address, nodeId: "gpu-2", tag, config: { tls: { cert: own.certFile, key: own.keyFile, ca: own.caFile }, coordinatorTokenFile: nodeTokenFile } });
    admin = createClient(AdminService, coordinator.address, { tls: tlsAs("admin"), ...withToken(t.tokens.ops) });
    await until("gpu-2 registered", async () => (await admin.listNodes({}, { timeoutMs: 20_000 })).nodes.some((n) => n.nodeId === "gpu-2"), 60_000);
  }, 120_000);

  afterAll(async () => {
    admin.close();
    await agent.cleanup();
    await coordinator.kill();
  }, 60_000);

  it("runs the coordinator's commands (an operator's load through the Admin API), each logged with the coordinator as the caller", async () => {
    const loaded = await admin.loadModel({ model: "m", nodeId: "gpu-2" }, { timeoutMs: 60_000 });
    expect(loaded.instance?.nodeId).toBe("gpu-2");
    expect(await agent.liveBackends()).toHaveLength(1);
    const start = logged(agent, "agent command").find((l) => l["method"] === "StartBackend");
    expect(start?.["caller"]).toBe('coordinator (CN "coordinator")');
    expect(start?.["model"]).toBe("m");
    // The coordinator says on whose behalf; the agent logs it next to the caller it verified.
    expect(start?.["requestedBy"]).toBe(operator);
    expect(coordinator.logLines.filter((l) => String(l["msg"]).startsWith("tls.cert lacks the coordinator identity"))).toEqual([]);
    // The coordinator's side: who asked, in its log and on the audit event of the load.
    expect(coordinator.logLines.find((l) => l["msg"] === "admin command" && l["method"] === "LoadModel")?.["actor"]).toBe(operator);
    const ev = await coordinator.waitForEvent("backend.loaded", (e) => e.incarnation === loaded.instance?.incarnation, 30_000);
    expect(ev["actor"]).toBe(operator);
    // The coordinator's certificate, used directly, is accepted too.
    const asCoordinator = createClient(AgentService, agent.address, { tls: tlsAs("coordinator") });
    try {
      expect((await asCoordinator.listBackends({}, { timeoutMs: 20_000 })).backends.map((b) => b.incarnation)).toEqual([loaded.instance?.incarnation]);
    } finally {
      asCoordinator.close();
    }
  }, 120_000);

  for (const [who, cert, why] of [
    ["a viewer's client certificate", "viewer", /certificate \(CN "viewer"\) does not carry the coordinator identity; only the coordinator may command an agent/],
    ["an admin's client certificate", "admin", /certificate \(CN "admin"\) does not carry the coordinator identity/],
    ["another node's certificate", "gpu-1", /certificate is issued to node "gpu-1"; only the coordinator may command an agent/],
    ["the agent's own node certificate", "gpu-2", /certificate is issued to node "gpu-2"/],
    ["a certificate naming both the coordinator and a node", "hybrid", /certificate is issued to node "gpu-1"/],
  ] as const) {
    it(`${who} cannot command an agent: ListBackends, StartBackend and StopBackend are PERMISSION_DENIED and nothing starts or stops`, async () => {
      const running = (await admin.listModels({}, { timeoutMs: 20_000 })).instances.find((i) => i.model === "m");
      expect(running).toBeDefined();
      const before = await agent.liveBackends();
      expect(before).toHaveLength(1);
      const c = createClient(AgentService, agent.address, { tls: tlsAs(cert) });
      try {
        const list = await failure(c.listBackends({}, { timeoutMs: 20_000 }));
        expect(list.code).toBe(Code.PermissionDenied);
        expect(list.rawMessage).toMatch(why);
        const rogue = (async () => {
          const seen: unknown[] = [];
          for await (const ev of c.startBackend({ incarnation: newIncarnation(), model: "rogue", backend: "backend-sim" }, { timeoutMs: 20_000 })) seen.push(ev);
          return seen;
        })();
        expect((await failure(rogue)).code).toBe(Code.PermissionDenied);
        const stop = await failure(c.stopBackend({ address: running?.address ?? "", incarnation: running?.incarnation ?? "", force: true, reason: "rogue" }, { timeoutMs: 20_000 }));
        expect(stop.code).toBe(Code.PermissionDenied);
        expect((await failure(c.stopOrphan({ pid: before[0] ?? 0, address: running?.address ?? "", force: true, reason: "rogue" }, { timeoutMs: 20_000 }))).code).toBe(Code.PermissionDenied);
        expect((await failure(c.getNodeStatus({}, { timeoutMs: 20_000 }))).code).toBe(Code.PermissionDenied);
      } finally {
        c.close();
      }
      // The process table: the same one backend, alive, and no rogue one.
      expect(await agent.liveBackends()).toEqual(before);
      expect((await admin.listModels({}, { timeoutMs: 20_000 })).instances.find((i) => i.model === "m")?.incarnation).toBe(running?.incarnation);
      const refused = logged(agent, "agent command refused").filter((l) => typeof l["caller"] === "string" && l["caller"].includes(`CN "${cert}"`));
      expect(refused.map((l) => l["method"])).toEqual(expect.arrayContaining(["ListBackends", "StartBackend", "StopBackend", "StopOrphan"]));
      expect(logged(agent, "agent command").filter((l) => typeof l["caller"] === "string" && l["caller"].includes(`CN "${cert}"`))).toEqual([]);
    }, 120_000);
  }

  it("runs the coordinator's stop (an operator's unload), logged with the coordinator as the caller and audited with the operator", async () => {
    const incarnation = (await admin.listModels({}, { timeoutMs: 20_000 })).instances.find((i) => i.model === "m")?.incarnation ?? "";
    await admin.unloadModel({ model: "m", force: false }, { timeoutMs: 60_000 });
    const ev = await coordinator.waitForEvent("eviction.started", (e) => e.incarnation === incarnation, 30_000);
    expect(ev["actor"]).toBe(operator);
    await until("the backend stopped", async () => ((await agent.liveBackends()).length === 0 ? true : undefined), 60_000);
    const stop = logged(agent, "agent command").find((l) => l["method"] === "StopBackend");
    expect(stop?.["caller"]).toBe('coordinator (CN "coordinator")');
    expect(stop?.["requestedBy"]).toBe(operator);
  }, 120_000);
});

describe("a coordinator certificate made before coordinators carried their identity", () => {
  it("is refused by the agent, which says how to issue a new one, the operator's load fails saying so, and the coordinator warns at start", async () => {
    const c = files("coordinator-old");
    const coordinator = await startCoordinatorProcess(join(dir, "old-coordinator.yaml"), {
      listen: "127.0.0.1:0",
      stateDir: join(dir, "old-coordinator-state"),
      embeddedAgent: false,
      recoveryWindow: 0,
      tls: { cert: c.certFile, key: c.keyFile, ca: c.caFile },
      models: [simModel("m")],
    });
    const own = files("gpu-1");
    const agent = await startRemoteAgent({ coordinator: coordinator.address, nodeId: "gpu-1", tag, config: { tls: { cert: own.certFile, key: own.keyFile, ca: own.caFile } } });
    const admin = createClient(AdminService, coordinator.address, { tls: tlsAs("admin") });
    try {
      await until("gpu-1 registered", async () => (await admin.listNodes({}, { timeoutMs: 20_000 })).nodes.some((n) => n.nodeId === "gpu-1"), 60_000);
      const e = await failure(admin.loadModel({ model: "m", nodeId: "gpu-1" }, { timeoutMs: 60_000 }));
      expect(e.rawMessage).toMatch(/warden certs issue coordinator/);
      expect(await agent.liveBackends()).toEqual([]);
      const refused = await until("the refusal logged", () => logged(agent, "agent command refused").find((l) => l["method"] === "StartBackend"));
      expect(refused["caller"]).toBe('certificate (CN "coordinator-old")');
      expect(String(refused["why"])).toMatch(/issue a new one with `warden certs issue coordinator <name> --out <certs dir> --san <host>`/);
      const warned = coordinator.logLines.find((l) => String(l["msg"]).startsWith("tls.cert lacks the coordinator identity"));
      expect(warned?.["msg"]).toMatch(/agents under mutual TLS will refuse every command from this coordinator.*warden certs issue coordinator/);
    } finally {
      admin.close();
      await agent.cleanup();
      await coordinator.kill();
    }
  }, 180_000);
});
