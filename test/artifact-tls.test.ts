/**
 * Artifacts over mutual TLS, with certificates made by `warden certs` and real
 * processes: a coordinator serving `artifactStore` with `tls:` (cert, key,
 * CA), and two agent processes whose TLS config is their own node
 * certificate. A model whose artifact is `store:<path>` is pulled by the first
 * agent from the store over TLS; the same file on the second node is then
 * fetched from the first agent over the agents' own TLS, with the ticket the
 * coordinator granted. The holder refuses a valid ticket presented under a
 * certificate that names another node than the ticket's requester, or no node
 * at all; the store refuses a certificate of another node than the one read for.
 * A holder whose agent serves another node's certificate (its files replaced
 * and reloaded after it registered) is refused by the requester, which then
 * pulls from the origin.
 */
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError, mintPeerTicket } from "@warden/common";
import { clientTlsOf, createClient, readTlsMaterial, type Client, type ClientTls } from "@warden/grpc";
import { AdminService, ArtifactStoreService, InstanceState, NodeState, PeerArtifactService } from "@warden/proto";
import { certsInit } from "../services/cli/src/certs.js";
import { simModel, until } from "./support/coordinator-harness.js";
import { uniqueTag } from "./support/agent-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { bytesOf, sha256Hex } from "./support/artifact-server.js";

const fileBytes = 3_000_000;
const body = bytesOf(fileBytes, 41);
const sha = sha256Hex(body);
/** The second artifact: held by tls-d, which then serves another node's certificate. */
const body2 = bytesOf(fileBytes, 43);
const sha2 = sha256Hex(body2);
let dir = "";
let certs = "";
let coord: CoordinatorProcess | undefined;
let holder: RemoteAgent;
let requester: RemoteAgent;
let admin: Client<typeof AdminService>;
let impostor: RemoteAgent | undefined;

const files = (name: string): { certFile: string; keyFile: string; caFile: string } => ({ certFile: join(certs, `${name}.pem`), keyFile: join(certs, `${name}-key.pem`), caFile: join(certs, "ca.pem") });
const tlsOf = (name: string): ClientTls => clientTlsOf(readTlsMaterial(files(name)));
/** What a server's TLS section says in a coordinator's or agent's config. */
const serverTls = (name: string): Record<string, string> => ({ cert: files(name).certFile, key: files(name).keyFile, ca: files(name).caFile });

function pinned(id: string, zone: string, file = { name: "m.bin", sha }): Record<string, unknown> {
  return { ...simModel(id, { knobs: { model_file_sha256: file.sha }, selector: { zone } }), modelFile: `weights/${file.name}`, artifacts: [{ source: `store:llama/${file.name}`, sha256: file.sha, sizeBytes: fileBytes, path: `weights/${file.name}` }] };
}

async function cached(a: RemoteAgent, digest = sha): Promise<Buffer> {
  return readFile(join(dir, a.nodeId, "models", ".warden-cache", "sha256", digest));
}

/** Bytes read, or the call's code when it failed. */
async function drain(stream: AsyncIterable<{ data: Uint8Array }>): Promise<number | { code: Code; message: string }> {
  try {
    let n = 0;
    for await (const c of stream) n += c.data.length;
    return n;
  } catch (err) {
    const e = WardenError.from(err);
    return { code: e.code, message: e.rawMessage };
  }
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-artifact-tls-"));
  certs = join(dir, "certs");
  // tls-c: a third node of the same CA, never started — what a node holding a leaked ticket has.
  await certsInit({ out: certs, agents: ["tls-a", "tls-b", "tls-c", "tls-d"] });
  const store = join(dir, "store");
  await mkdir(join(store, "llama"), { recursive: true });
  await writeFile(join(store, "llama", "m.bin"), body);
  await writeFile(join(store, "llama", "m2.bin"), body2);
  coord = await startCoordinatorProcess(join(dir, "coord.yaml"), {
    listen: "127.0.0.1:0",
    stateDir: join(dir, "coord-state"),
    embeddedAgent: false,
    recoveryWindow: "200ms",
    tls: serverTls("coordinator"),
    artifactStore: store,
    // "either" is never loaded: its ExplainPlacement says whether a node holds the file.
    models: [pinned("on-a", "a"), pinned("on-b", "b"), { ...pinned("either", "a"), selector: {} }, pinned("on-d2", "d", { name: "m2.bin", sha: sha2 }), pinned("on-b2", "b", { name: "m2.bin", sha: sha2 }), { ...pinned("either2", "d", { name: "m2.bin", sha: sha2 }), selector: {} }],
  });
  const tag = uniqueTag("artifact-tls");
  const agentOf = async (nodeId: string, zone: string): Promise<RemoteAgent> => {
    const modelsPath = join(dir, nodeId, "models");
    await mkdir(modelsPath, { recursive: true });
    return startRemoteAgent({ coordinator: coord?.address ?? "", nodeId, tag, labels: { zone }, config: { tls: serverTls(nodeId), modelsPath } });
  };
  [holder, requester] = await Promise.all([agentOf("tls-a", "a"), agentOf("tls-b", "b")]);
  admin = createClient(AdminService, coord.address, { tls: tlsOf("admin") });
  await until("both nodes ready", async () => (await admin.listNodes({}, { timeoutMs: 20_000 })).nodes.filter((n) => n.state === NodeState.READY).length === 2, 60_000);
}, 180_000);

afterAll(async () => {
  admin.close();
  await Promise.all([holder.cleanup(), requester.cleanup(), impostor?.cleanup()]);
  await coord?.kill();
  await rm(dir, { recursive: true, force: true });
  expect(await liveRemoteAgents()).toEqual([]);
}, 60_000);

describe("artifacts over mutual TLS (real processes)", { timeout: 240_000 }, () => {
  it("the first node pulls a store: artifact from the coordinator over TLS; the second fetches it from the first over the agents' TLS", async () => {
    await until("on-a placeable", async () => (await admin.explainPlacement({ model: "on-a" }, { timeoutMs: 20_000 })).nodes.find((n) => n.nodeId === "tls-a")?.reason.includes("pull") === true, 60_000);
    const a = await admin.loadModel({ model: "on-a" }, { timeoutMs: 120_000 });
    expect(a.instance?.nodeId).toBe("tls-a");
    expect((await cached(holder)).equals(body)).toBe(true);
    expect(holder.proc.lines.some((l) => l.includes('"artifact ready"') && l.includes(sha))).toBe(true);
    expect(holder.proc.lines.some((l) => l.includes("artifact fetched from a peer"))).toBe(false);

    // The holder's heartbeat lists the digest: what the coordinator finds holders by.
    await until("tls-a reported the digest", async () => (await admin.explainPlacement({ model: "either" }, { timeoutMs: 20_000 })).nodes.find((n) => n.nodeId === "tls-a")?.reason.endsWith("; cached)") === true, 60_000);
    const b = await admin.loadModel({ model: "on-b" }, { timeoutMs: 120_000 });
    expect(b.instance?.nodeId).toBe("tls-b");
    await until("on-b ready", async () => (await admin.listModels({}, { timeoutMs: 20_000 })).instances.some((i) => i.model === "on-b" && i.state === InstanceState.READY), 60_000);
    expect((await cached(requester)).equals(body)).toBe(true);
    expect(requester.proc.lines.some((l) => l.includes("artifact fetched from a peer"))).toBe(true);
    expect(requester.proc.lines.some((l) => l.includes("peer fetch failed"))).toBe(false);
    expect(holder.proc.lines.some((l) => l.includes("peer read refused"))).toBe(false);

    // Both hops really are TLS: the coordinator and the holder refuse a plaintext client.
    const plainStore = createClient(ArtifactStoreService, coord?.address ?? "");
    const plainPeer = createClient(PeerArtifactService, holder.address);
    try {
      expect(await drain(plainStore.readArtifact({ nodeId: "tls-a", path: "llama/m.bin", offset: 0n }, { timeoutMs: 20_000 }))).toMatchObject({ code: Code.Unavailable });
      expect(await drain(plainPeer.readPeerArtifact({ sha256: sha, sizeBytes: BigInt(fileBytes), offset: 0n, requesterNodeId: "tls-b", ticket: "a".repeat(64), expiresAtMs: BigInt(Date.now() + 60_000) }, { timeoutMs: 20_000 }))).toMatchObject({ code: Code.Unavailable });
    } finally {
      plainStore.close();
      plainPeer.close();
    }
  });

  it("the store serves a node's certificate only for that node", async () => {
    const own = createClient(ArtifactStoreService, coord?.address ?? "", { tls: tlsOf("tls-a") });
    const other = createClient(ArtifactStoreService, coord?.address ?? "", { tls: tlsOf("tls-b") });
    try {
      expect(await drain(own.readArtifact({ nodeId: "tls-a", path: "llama/m.bin", offset: 0n }, { timeoutMs: 20_000 }))).toBe(fileBytes);
      const refused = await drain(other.readArtifact({ nodeId: "tls-a", path: "llama/m.bin", offset: 0n }, { timeoutMs: 20_000 }));
      expect(refused).toMatchObject({ code: Code.PermissionDenied });
      expect(typeof refused === "object" ? refused.message : "").toMatch(/node_id: "tls-a" refused: its certificate is issued to node "tls-b"/);
    } finally {
      own.close();
      other.close();
    }
  });

  it("the holder refuses a valid ticket under a certificate naming another node than its requester, or no node", async () => {
    const key = Buffer.from((await readFile(join(holder.stateDir, "peer.key"), "utf8")).trim(), "hex");
    const expiresAtMs = Date.now() + 60_000;
    // A good ticket for requester tls-b, as the coordinator grants one.
    const ticket = mintPeerTicket(key, { sha256: sha, requesterNodeId: "tls-b", holderNodeId: "tls-a", expiresAtMs });
    const req = { sha256: sha, sizeBytes: BigInt(fileBytes), offset: 0n, requesterNodeId: "tls-b", ticket, expiresAtMs: BigInt(expiresAtMs) };
    const as = (name: string): Client<typeof PeerArtifactService> => createClient(PeerArtifactService, holder.address, { tls: tlsOf(name) });
    const clients = { b: as("tls-b"), c: as("tls-c"), admin: as("admin"), coordinator: as("coordinator") };
    const noCert = createClient(PeerArtifactService, holder.address, { tls: { ca: tlsOf("tls-b").ca } });
    try {
      // The requester's own certificate reads the file: the refusals below are the certificates'.
      expect(await drain(clients.b.readPeerArtifact(req, { timeoutMs: 20_000 }))).toBe(fileBytes);
      const byC = await drain(clients.c.readPeerArtifact(req, { timeoutMs: 20_000 }));
      expect(byC).toMatchObject({ code: Code.PermissionDenied });
      expect(typeof byC === "object" ? byC.message : "").toMatch(/certificate names node "tls-c", the ticket "tls-b"/);
      for (const who of ["admin", "coordinator"] as const) {
        const r = await drain(clients[who].readPeerArtifact(req, { timeoutMs: 20_000 }));
        expect(r, who).toMatchObject({ code: Code.PermissionDenied });
        expect(typeof r === "object" ? r.message : "", who).toMatch(/names no node, the ticket "tls-b"/);
      }
      expect(await drain(noCert.readPeerArtifact(req, { timeoutMs: 20_000 }))).toMatchObject({ code: Code.Unavailable });
    } finally {
      for (const c of Object.values(clients)) c.close();
      noCert.close();
    }
  });

  it("a peer whose server certificate names another node is refused: the requester pulls from the origin instead", async () => {
    // tls-d's agent reads its certificate from files of its own, so they can be replaced under it.
    const own = join(dir, "tls-d-tls");
    await mkdir(own, { recursive: true });
    const cert = join(own, "cert.pem");
    const key = join(own, "key.pem");
    await copyFile(files("tls-d").certFile, cert);
    await copyFile(files("tls-d").keyFile, key);
    const modelsPath = join(dir, "tls-d", "models");
    await mkdir(modelsPath, { recursive: true });
    impostor = await startRemoteAgent({ coordinator: coord?.address ?? "", nodeId: "tls-d", tag: uniqueTag("artifact-tls-d"), labels: { zone: "d" }, config: { tls: { cert, key, ca: files("tls-d").caFile }, modelsPath } });
    const d = impostor;
    await until("tls-d ready", async () => (await admin.listNodes({}, { timeoutMs: 20_000 })).nodes.some((n) => n.nodeId === "tls-d" && n.state === NodeState.READY), 60_000);
    expect((await admin.loadModel({ model: "on-d2" }, { timeoutMs: 120_000 })).instance?.nodeId).toBe("tls-d");
    expect((await cached(d, sha2)).equals(body2)).toBe(true);
    await until("tls-d reported the digest", async () => (await admin.explainPlacement({ model: "either2" }, { timeoutMs: 20_000 })).nodes.find((n) => n.nodeId === "tls-d")?.reason.endsWith("; cached)") === true, 60_000);

    // After it registered, tls-d's agent serves tls-c's certificate (valid, same CA): new handshakes with it present that one.
    await copyFile(files("tls-c").certFile, cert);
    await copyFile(files("tls-c").keyFile, key);
    process.kill(d.pid, "SIGHUP");
    await until("tls-d reloaded", () => d.proc.lines.some((l) => l.includes("tls certificate reloaded")), 20_000);

    // The coordinator names tls-d as the holder; the requester refuses its certificate and reads the store.
    expect((await admin.loadModel({ model: "on-b2" }, { timeoutMs: 120_000 })).instance?.nodeId).toBe("tls-b");
    expect((await cached(requester, sha2)).equals(body2)).toBe(true);
    expect(requester.proc.lines.some((l) => l.includes("artifact fetched from a peer") && l.includes(sha2))).toBe(false);
    const refusal = requester.proc.lines.find((l) => l.includes("peer refused: its certificate does not name the node") && l.includes(sha2));
    expect(refusal).toContain('peer node \\"tls-d\\"');
    expect(refusal).toContain('a certificate issued to node \\"tls-c\\"');
  });
});
