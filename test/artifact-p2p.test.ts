/**
 * Peer-to-peer artifact fetch between real agent processes, with a real HTTP
 * origin (node:http, counting the bytes it serves): the second agent gets the
 * digest from the first; a peer killed mid-transfer, and a peer serving wrong
 * bytes, fall back to the origin with a correct cache entry; a read without a
 * valid ticket is refused and nothing outside the cache is readable.
 */
import { randomBytes } from "node:crypto";
import { mkdir, readFile, rm, stat, symlink } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError, mintPeerTicket } from "@warden/common";
import { GrpcServer, createClient, type Client } from "@warden/grpc";
import { AgentService, PeerArtifactService, type StartBackendResponse } from "@warden/proto";
import { killLeftBehind, liveTaggedSims, newIncarnation, pidAlive, randomPortRange, simCatalog, tempDir, uniqueTag, waitFor } from "./support/agent-harness.js";
import { startAgentProcess, writeAgentConfig, type AgentProcess } from "./support/agent-process.js";
import { bytesOf, sha256Hex, startArtifactServer, type ArtifactServer } from "./support/artifact-server.js";

const fileTag = uniqueTag("artifact-p2p");
const started: AgentProcess[] = [];
const clients: Client<typeof AgentService>[] = [];
let dir: string;
let origin: ArtifactServer;
let n = 0;

interface Node {
  readonly nodeId: string;
  readonly proc: AgentProcess;
  readonly client: Client<typeof AgentService>;
  readonly stateDir: string;
  readonly modelsPath: string;
  key(): Promise<Buffer>;
}

async function node(nodeId: string): Promise<Node> {
  const ports = randomPortRange(4);
  const stateDir = join(dir, nodeId, "state");
  const modelsPath = join(dir, nodeId, "models");
  await mkdir(modelsPath, { recursive: true });
  const configPath = join(dir, nodeId, "agent.yaml");
  await writeAgentConfig(configPath, {
    nodeId,
    stateDir,
    modelsPath,
    ports: { min: ports.min, max: ports.max, quarantine: "0s" },
    catalog: { sim: simCatalog(fileTag) },
    grace: "5s",
    readiness: { attempts: 100, interval: "200ms", initialInterval: "25ms" },
    nvidiaSmi: "",
    orphanScanInterval: "1h",
    artifactStallTimeout: "30s",
  });
  const proc = await startAgentProcess(configPath, ["--stop-backends-on-exit"]);
  started.push(proc);
  const client = createClient(AgentService, proc.address);
  clients.push(client);
  return { nodeId, proc, client, stateDir, modelsPath, key: async () => Buffer.from((await readFile(join(stateDir, "peer.key"), "utf8")).trim(), "hex") };
}

type Artifact = { source: string; sha256: string; sizeBytes: bigint; path: string };

function publish(size: number): { artifact: Artifact; body: Buffer; name: string } {
  const name = `p${String(++n)}.bin`;
  const body = bytesOf(size, 700 + n);
  origin.files.set(`/${name}`, body);
  return { artifact: { source: `${origin.url}/${name}`, sha256: sha256Hex(body), sizeBytes: BigInt(size), path: `models/${name}` }, body, name };
}

/** What the coordinator grants: a ticket for (digest, requester) under the holder's peer key. */
async function peerOf(holder: { nodeId: string; address: string; key(): Promise<Buffer> }, requester: string, sha256: string): Promise<{ nodeId: string; address: string; ticket: string; expiresAtMs: bigint }> {
  const expiresAtMs = Date.now() + 5 * 60_000;
  return { nodeId: holder.nodeId, address: holder.address, ticket: mintPeerTicket(await holder.key(), { sha256, requesterNodeId: requester, holderNodeId: holder.nodeId, expiresAtMs }), expiresAtMs: BigInt(expiresAtMs) };
}

async function start(client: Client<typeof AgentService>, model: string, artifact: Artifact & { peers?: unknown[] }): Promise<StartBackendResponse[]> {
  const out: StartBackendResponse[] = [];
  const req = { incarnation: newIncarnation(), model, backend: "sim", modelFile: artifact.path, artifacts: [artifact] as never, options: [`sim.model_file_sha256:${artifact.sha256}`] };
  for await (const ev of client.startBackend(req, { timeoutMs: 90_000 })) out.push(ev);
  return out;
}

function outcome(events: readonly StartBackendResponse[]): string {
  const e = events[events.length - 1]?.event;
  return e?.case === "failed" ? `failed: ${e.value.message}` : (e?.case ?? "none");
}

async function cached(nd: Node, sha256: string): Promise<Buffer> {
  return readFile(join(nd.modelsPath, ".warden-cache", "sha256", sha256));
}

beforeAll(async () => {
  origin = await startArtifactServer();
  dir = await tempDir("warden-artifact-p2p");
});

afterAll(async () => {
  for (const c of clients) c.close();
  // --stop-backends-on-exit: each agent stops the backend it started on SIGTERM.
  await Promise.all(started.map(async (p) => ((await pidAlive(p.pid)) ? p.terminate() : null)));
  const leaked = await liveTaggedSims(fileTag);
  await killLeftBehind([], leaked);
  await origin.close();
  await rm(dir, { recursive: true, force: true });
  expect(leaked).toEqual([]);
});

describe("peer-to-peer artifact fetch", () => {
  it("the second agent gets the digest from the first: the origin serves one copy", async () => {
    const a = await node("p2p-a1");
    const b = await node("p2p-b1");
    const { artifact, body, name } = publish(3_000_000);
    const before = origin.bytesSent;
    expect(outcome(await start(a.client, "m1", artifact))).toBe("ready");
    expect(outcome(await start(b.client, "m1", { ...artifact, peers: [await peerOf({ ...a, address: a.proc.address }, b.nodeId, artifact.sha256)] }))).toBe("ready");
    expect(origin.requestsFor(`/${name}`)).toHaveLength(1);
    expect(origin.bytesSent - before).toBe(body.length);
    expect((await cached(b, artifact.sha256)).equals(body)).toBe(true);
    expect(b.proc.lines.some((l) => l.includes("artifact fetched from a peer"))).toBe(true);
  }, 120_000);

  it("a peer killed mid-transfer: the pull resumes from the origin, the load succeeds, the cache entry is right", async () => {
    const a = await node("p2p-a2");
    const b = await node("p2p-b2");
    const { artifact, body, name } = publish(4_000_000);
    // A pulls slowly from the origin; B reads A's partial as it grows.
    origin.chunkBytes = 64 * 1024;
    origin.paceMs = 100;
    try {
      const aStart = start(a.client, "m2", artifact).catch(() => []);
      const aPartial = join(a.modelsPath, ".warden-cache", "partial", `${artifact.sha256}.partial`);
      await waitFor("A's partial", async () => ((await stat(aPartial).catch(() => undefined))?.size ?? 0) > 0, 60_000);
      const bStart = start(b.client, "m2", { ...artifact, peers: [await peerOf({ ...a, address: a.proc.address }, b.nodeId, artifact.sha256)] });
      const bPartial = join(b.modelsPath, ".warden-cache", "partial", `${artifact.sha256}.partial`);
      await waitFor("B's partial from A", async () => ((await stat(bPartial).catch(() => undefined))?.size ?? 0) > 0, 60_000);
      a.proc.child.kill("SIGKILL");
      await a.proc.exited;
      await aStart;
      expect(outcome(await bStart)).toBe("ready");
      expect((await cached(b, artifact.sha256)).equals(body)).toBe(true);
      // B went on from where A's bytes ended: a Range request to the origin (A's own was the first, from 0).
      expect(origin.requestsFor(`/${name}`).slice(1).some((r) => r.range !== undefined && r.range !== "bytes=0-")).toBe(true);
      expect(b.proc.lines.some((l) => l.includes("peer fetch failed; trying the next source"))).toBe(true);
      // Its record (what artifact.pulled carries) counts both sources' bytes: the peer's first, the origin's after.
      const ready = b.proc.lines.filter((l) => l.includes('"artifact ready"')).map((l) => JSON.parse(l) as { msg?: string; sha256?: string; sources?: string; resumedBytes?: number }).find((o) => o.msg === "artifact ready" && o.sha256 === artifact.sha256);
      const m = /^peer p2p-a2: (\d+), origin: (\d+)$/.exec(ready?.sources ?? "");
      expect(m, ready?.sources).not.toBeNull();
      const [fromPeer, fromOrigin] = [Number(m?.[1]), Number(m?.[2])];
      expect([fromPeer > 0, fromOrigin > 0, fromPeer + fromOrigin, ready?.resumedBytes]).toEqual([true, true, body.length, 0]);
    } finally {
      origin.paceMs = 0;
    }
  }, 180_000);

  it("a peer serving wrong bytes is rejected by the digest and the origin is used", async () => {
    const b = await node("p2p-b3");
    const { artifact, body } = publish(2_000_000);
    const wrong = bytesOf(body.length, 9_999);
    let reads = 0;
    const liar = new GrpcServer();
    liar.add(PeerArtifactService, {
      async *readPeerArtifact(req) {
        reads++;
        for (let at = Number(req.offset); at < wrong.length; at += 1024 * 1024) yield { offset: BigInt(at), totalBytes: BigInt(wrong.length), data: wrong.subarray(at, Math.min(wrong.length, at + 1024 * 1024)) };
      },
    });
    const { address } = await liar.listen("127.0.0.1:0");
    try {
      const before = origin.bytesSent;
      const events = await start(b.client, "m3", { ...artifact, peers: [{ nodeId: "liar", address, ticket: "a".repeat(64), expiresAtMs: BigInt(Date.now() + 60_000) }] });
      expect(outcome(events)).toBe("ready");
      expect(reads).toBe(1);
      expect((await cached(b, artifact.sha256)).equals(body)).toBe(true);
      expect(origin.bytesSent - before).toBe(body.length);
      expect(b.proc.lines.some((l) => l.includes("peer fetch failed") && l.includes("hash to sha256"))).toBe(true);
    } finally {
      await liar.shutdown(1_000);
    }
  }, 120_000);

  it("a read without a valid ticket is refused; nothing outside the cache is readable", async () => {
    const a = await node("p2p-a4");
    const { artifact } = publish(100_000);
    expect(outcome(await start(a.client, "m4", artifact))).toBe("ready");
    const key = await a.key();
    const peer = createClient(PeerArtifactService, a.proc.address);
    const read = async (req: { sha256: string; sizeBytes: bigint; requesterNodeId: string; ticket: string; expiresAtMs: bigint }): Promise<number> => {
      try {
        let bytes = 0;
        for await (const c of peer.readPeerArtifact({ offset: 0n, ...req }, { timeoutMs: 20_000 })) bytes += c.data.length;
        return bytes;
      } catch (err) {
        return WardenError.from(err).code;
      }
    };
    const claim = { sha256: artifact.sha256, requesterNodeId: "p2p-b4", holderNodeId: a.nodeId };
    const ok = { sha256: artifact.sha256, sizeBytes: artifact.sizeBytes, requesterNodeId: "p2p-b4" };
    const soon = Date.now() + 60_000;
    try {
      // the good ticket reads the file: the refusals below are the tickets', not a broken server
      expect(await read({ ...ok, ticket: mintPeerTicket(key, { ...claim, expiresAtMs: soon }), expiresAtMs: BigInt(soon) })).toBe(100_000);
      expect(await read({ ...ok, ticket: "", expiresAtMs: BigInt(soon) })).toBe(Code.Unauthenticated);
      expect(await read({ ...ok, ticket: mintPeerTicket(randomBytes(32), { ...claim, expiresAtMs: soon }), expiresAtMs: BigInt(soon) })).toBe(Code.Unauthenticated);
      // granted to another requester, or another holder, or expired, or too long-lived
      expect(await read({ ...ok, requesterNodeId: "p2p-c4", ticket: mintPeerTicket(key, { ...claim, expiresAtMs: soon }), expiresAtMs: BigInt(soon) })).toBe(Code.Unauthenticated);
      expect(await read({ ...ok, ticket: mintPeerTicket(key, { ...claim, holderNodeId: "other", expiresAtMs: soon }), expiresAtMs: BigInt(soon) })).toBe(Code.Unauthenticated);
      const past = Date.now() - 1_000;
      expect(await read({ ...ok, ticket: mintPeerTicket(key, { ...claim, expiresAtMs: past }), expiresAtMs: BigInt(past) })).toBe(Code.Unauthenticated);
      const far = Date.now() + 3_600_000;
      expect(await read({ ...ok, ticket: mintPeerTicket(key, { ...claim, expiresAtMs: far }), expiresAtMs: BigInt(far) })).toBe(Code.Unauthenticated);
      // a digest that is a path is refused before any file is looked at
      expect(await read({ ...ok, sha256: "../../state/peer.key", ticket: mintPeerTicket(key, { ...claim, sha256: "../../state/peer.key", expiresAtMs: soon }), expiresAtMs: BigInt(soon) })).toBe(Code.InvalidArgument);
      // the peer key, symlinked into the cache under its own digest with a valid ticket: never followed
      const keyText = await readFile(join(a.stateDir, "peer.key"));
      const keyDigest = sha256Hex(keyText);
      await symlink(join(a.stateDir, "peer.key"), join(a.modelsPath, ".warden-cache", "sha256", keyDigest));
      expect(await read({ sha256: keyDigest, sizeBytes: BigInt(keyText.length), requesterNodeId: "p2p-b4", ticket: mintPeerTicket(key, { ...claim, sha256: keyDigest, expiresAtMs: soon }), expiresAtMs: BigInt(soon) })).toBe(Code.NotFound);
      // a digest the agent neither holds nor pulls
      const other = "b".repeat(64);
      expect(await read({ ...ok, sha256: other, ticket: mintPeerTicket(key, { ...claim, sha256: other, expiresAtMs: soon }), expiresAtMs: BigInt(soon) })).toBe(Code.NotFound);
      expect(a.proc.lines.some((l) => l.includes("peer read refused"))).toBe(true);
    } finally {
      peer.close();
    }
  }, 120_000);
});
