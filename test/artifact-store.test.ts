/**
 * The coordinator's artifact store over real gRPC on loopback: a coordinator
 * with auth on (no embedded agent) serving `artifactStore`, and a real agent
 * process for node gpu-1 holding its node token. A model whose artifact is
 * `store:<path>` is pulled by the agent into its cache and loaded by a real
 * backend-sim that checks the model file's digest. ReadArtifact is refused to
 * other credentials and to paths that leave the store.
 */
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "@warden/common";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, ArtifactStoreService, InstanceState, NodeState } from "@warden/proto";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { withToken, writeTokensFile } from "./support/auth-tokens.js";
import { bytesOf, sha256Hex } from "./support/artifact-server.js";
import { refusedWith } from "./support/refusal.js";

const tag = `artifact-store-${String(process.pid)}-${String(Date.now())}`;

async function readAll(client: Client<typeof ArtifactStoreService>, nodeId: string, path: string, offset = 0n): Promise<{ offsets: bigint[]; total: bigint; data: Buffer }> {
  const parts: Buffer[] = [];
  const offsets: bigint[] = [];
  let total = -1n;
  for await (const c of client.readArtifact({ nodeId, path, offset })) {
    offsets.push(c.offset);
    total = c.totalBytes;
    parts.push(Buffer.from(c.data));
  }
  return { offsets, total, data: Buffer.concat(parts) };
}

describe("artifact store", () => {
  let tc: TestCoordinator;
  let dir: string;
  let modelsPath: string;
  let tokens: Record<"admin" | "gpu1" | "gpu2", string>;
  let admin: Client<typeof AdminService>;
  let gpu1: RemoteAgent;
  const body = bytesOf(2_500_000, 77);
  const sha256 = sha256Hex(body);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-artifact-store-"));
    const store = join(dir, "store");
    modelsPath = join(dir, "models");
    await mkdir(join(store, "llama"), { recursive: true });
    await mkdir(modelsPath);
    await writeFile(join(store, "llama", "m.bin"), body);
    await writeFile(join(dir, "outside.txt"), "secret");
    await symlink(join(dir, "outside.txt"), join(store, "escape"));
    const t = await writeTokensFile(dir, { admin: { role: "admin" }, gpu1: { role: "node", node: "gpu-1" }, gpu2: { role: "node", node: "gpu-2" } });
    tokens = t.tokens;
    await writeFile(join(dir, "gpu-1.token"), `${tokens.gpu1}\n`, { mode: 0o600 });
    const stored = { ...simModel("stored", { knobs: { model_file_sha256: sha256 } }), modelFile: "weights/m.bin", artifacts: [{ source: "store:llama/m.bin", sha256, sizeBytes: body.length, path: "weights/m.bin" }] };
    const missing = { ...simModel("missing"), artifacts: [{ source: "store:llama/gone.bin", sha256: "2".repeat(64), sizeBytes: 10, path: "gone.bin" }] };
    tc = await startTestCoordinator({ embeddedAgent: false, models: [stored, missing], extra: { auth: { tokensFile: t.path }, artifactStore: store } });
    admin = createClient(AdminService, tc.c.address, withToken(tokens.admin));
    gpu1 = await startRemoteAgent({ coordinator: tc.c.address, nodeId: "gpu-1", tag, config: { coordinatorTokenFile: join(dir, "gpu-1.token"), modelsPath } });
    await until("gpu-1 ready", async () => (await admin.listNodes({})).nodes.some((n) => n.nodeId === "gpu-1" && n.state === NodeState.READY));
  }, 90_000);

  afterAll(async () => {
    admin.close();
    await gpu1.cleanup();
    await tc.close();
    await rm(dir, { recursive: true, force: true });
    expect(await liveRemoteAgents()).toEqual([]);
  });

  it("a model whose artifact is store:<path> is pulled into the node's cache and loaded from it (the backend checks the file's digest)", async () => {
    const incarnation = (await admin.loadModel({ model: "stored", nodeId: "gpu-1" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    expect(incarnation).not.toBe("");
    await until("stored ready", async () => (await admin.listModels({})).instances.some((i) => i.incarnation === incarnation && i.state === InstanceState.READY), 60_000);
    expect((await readFile(join(modelsPath, ".warden-cache", "sha256", sha256))).equals(body)).toBe(true);
    const lines = gpu1.proc.lines.filter((l) => l.includes('"artifact ready"'));
    expect(lines.some((l) => l.includes(sha256))).toBe(true);
  }, 90_000);

  it("a store path that is not there fails the load naming the artifact, with ARTIFACT_NOT_FOUND", async () => {
    const err = await refusedWith(admin.loadModel({ model: "missing", nodeId: "gpu-1" }, { timeoutMs: 60_000 }));
    expect(err.rawMessage).toContain(`artifact "gone.bin" (sha256 ${"2".repeat(64)}, source store:llama/gone.bin): the coordinator's store has no "llama/gone.bin"`);
    // the agent's typed code, in its log of the failed start
    await until("start failed logged", () => gpu1.proc.lines.some((l) => l.includes('"start failed"') && l.includes('"code":"ARTIFACT_NOT_FOUND"')));
  }, 90_000);

  it("ReadArtifact serves node gpu-1's token from an offset, every chunk naming its offset and the size", async () => {
    const client = createClient(ArtifactStoreService, tc.c.address, withToken(tokens.gpu1));
    try {
      const r = await readAll(client, "gpu-1", "llama/m.bin", 1_000_000n);
      expect(r.total).toBe(BigInt(body.length));
      expect(r.offsets[0]).toBe(1_000_000n);
      expect(r.offsets[1]).toBe(1_000_000n + (1n << 20n));
      expect(r.data.equals(body.subarray(1_000_000))).toBe(true);
      // at the end: one empty chunk that still names the size
      const end = await readAll(client, "gpu-1", "llama/m.bin", BigInt(body.length));
      expect(end).toEqual({ offsets: [BigInt(body.length)], total: BigInt(body.length), data: Buffer.alloc(0) });
      expect(await refusedWith(readAll(client, "gpu-1", "llama/m.bin", BigInt(body.length) + 1n))).toMatchObject({ code: Code.OutOfRange, details: { field: "offset" } });
    } finally {
      client.close();
    }
  });

  it("refuses path traversal, symlinks out of the store, missing files, other nodes' and non-node credentials", async () => {
    const node = createClient(ArtifactStoreService, tc.c.address, withToken(tokens.gpu1));
    const other = createClient(ArtifactStoreService, tc.c.address, withToken(tokens.gpu2));
    const adminStore = createClient(ArtifactStoreService, tc.c.address, withToken(tokens.admin));
    const anonymous = createClient(ArtifactStoreService, tc.c.address);
    try {
      for (const p of ["../outside.txt", "llama/../../outside.txt", "/etc/passwd", "llama\\m.bin", ""]) {
        expect(await refusedWith(readAll(node, "gpu-1", p)), p).toMatchObject({ code: Code.InvalidArgument, details: { field: "path" } });
      }
      expect(await refusedWith(readAll(node, "gpu-1", "escape"))).toMatchObject({ code: Code.PermissionDenied, details: { field: "path" } });
      expect(await refusedWith(readAll(node, "gpu-1", "llama/none.bin"))).toMatchObject({ code: Code.NotFound });
      expect(await refusedWith(readAll(node, "gpu-1", "llama"))).toMatchObject({ code: Code.NotFound });
      expect(await refusedWith(readAll(other, "gpu-1", "llama/m.bin"))).toMatchObject({ code: Code.PermissionDenied, details: { field: "node_id" } });
      expect((await refusedWith(readAll(adminStore, "gpu-1", "llama/m.bin"))).code).toBe(Code.PermissionDenied);
      expect((await refusedWith(readAll(anonymous, "gpu-1", "llama/m.bin"))).code).toBe(Code.Unauthenticated);
    } finally {
      node.close();
      other.close();
      adminStore.close();
      anonymous.close();
    }
  });
});

describe("artifact store, single machine", () => {
  it("the embedded agent reads store: artifacts in process and loads the cached file", async () => {
    const dir = await mkdtemp(join(tmpdir(), "warden-artifact-embedded-"));
    const body = bytesOf(300_000, 5);
    const sha256 = sha256Hex(body);
    await mkdir(join(dir, "store"));
    await mkdir(join(dir, "models"));
    await writeFile(join(dir, "store", "w.bin"), body);
    const m = { ...simModel("local-stored", { knobs: { model_file_sha256: sha256 } }), modelFile: "w.bin", artifacts: [{ source: "store:w.bin", sha256, sizeBytes: body.length, path: "w.bin" }] };
    const tc = await startTestCoordinator({ models: [m], agent: { modelsPath: join(dir, "models") }, extra: { artifactStore: join(dir, "store") } });
    try {
      const incarnation = (await tc.admin.loadModel({ model: "local-stored" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
      await until("local-stored ready", async () => (await tc.admin.listModels({})).instances.some((i) => i.incarnation === incarnation && i.state === InstanceState.READY), 60_000);
      expect((await readFile(join(dir, "models", ".warden-cache", "sha256", sha256))).equals(body)).toBe(true);
    } finally {
      await tc.close();
      await rm(dir, { recursive: true, force: true });
    }
  }, 90_000);
});
