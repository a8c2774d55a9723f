/**
 * Heartbeats on NodeService.HeartbeatStream, over real processes: a
 * coordinator process with auth on (a node token per node) and a real agent
 * process. The agent's heartbeats flow on one stream; a message on a node's
 * stream that names another node ends the stream PERMISSION_DENIED and
 * changes nothing; bytes that are not a heartbeat end it INVALID_ARGUMENT
 * after the answers before them; a reload that revokes the stream's token ends it; an agent
 * whose coordinator does not serve the stream (`heartbeatStream: false`, as
 * an older coordinator) heartbeats unary.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { Client as RawClient, Metadata, credentials, type ClientDuplexStream } from "@grpc/grpc-js";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { Code, WardenError, wardenVersion } from "@warden/common";
import { createClient, fromGrpcError, type Client } from "@warden/grpc";
import { AdminService, HeartbeatRequestSchema, NodeService, NodeState, type HeartbeatResponse } from "@warden/proto";
import { mintToken, tokenLine } from "@warden/coordinator";
import { simModel, until } from "./support/coordinator-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { withToken } from "./support/auth-tokens.js";

const tag = `hb-stream-${String(process.pid)}-${String(Date.now())}`;
/** Generous: a loaded 2-core machine. Conditions are awaited, never timed. */
const waitMs = 60_000;

type HeartbeatInit = MessageInitShape<typeof HeartbeatRequestSchema>;

/** A HeartbeatStream the test writes to message by message; `ended` is how it ended (undefined: open). */
interface TestStream {
  send(r: HeartbeatInit): void;
  next(): Promise<HeartbeatResponse>;
  ended: Code | "ok" | undefined;
  close(): void;
}

function openStream(address: string, token: string): TestStream {
  const client = createClient(NodeService, address, withToken(token));
  const queue: HeartbeatInit[] = [];
  let wake: (() => void) | undefined;
  let closed = false;
  const requests = async function* (): AsyncIterable<HeartbeatInit> {
    for (;;) {
      const r = queue.shift();
      if (r !== undefined) yield r;
      else if (closed) return;
      else await new Promise<void>((res) => (wake = res));
    }
  };
  const replies = client.heartbeatStream(requests(), { timeoutMs: 10 * waitMs })[Symbol.asyncIterator]();
  const s: TestStream = {
    ended: undefined,
    send(r) {
      queue.push(r);
      wake?.();
    },
    async next() {
      try {
        const n = await replies.next();
        if (n.done === true) {
          s.ended = "ok";
          throw new Error("the stream ended without an answer");
        }
        return n.value;
      } catch (err) {
        s.ended ??= WardenError.from(err).code;
        throw err;
      }
    },
    close() {
      closed = true;
      wake?.();
      client.close();
    },
  };
  return s;
}

const node = (admin: Client<typeof AdminService>, id: string) => async () => (await admin.listNodes({}, { timeoutMs: 20_000 })).nodes.find((n) => n.nodeId === id);
const heartbeatAtMs = (n: { lastHeartbeatAt?: Parameters<typeof timestampMs>[0] } | undefined): number => (n?.lastHeartbeatAt === undefined ? 0 : timestampMs(n.lastHeartbeatAt));

describe("HeartbeatStream, auth on", () => {
  let dir: string;
  let coord: CoordinatorProcess;
  let admin: Client<typeof AdminService>;
  let gpu1: RemoteAgent;
  const tokens = { admin: mintToken(), gpu1: mintToken(), gpu2: mintToken(), gpu3: mintToken() };
  const tokensPath = (): string => join(dir, "tokens");
  const writeTokens = async (without: readonly (keyof typeof tokens)[] = []): Promise<void> => {
    const lines = [tokenLine(tokens.admin, "admin", { name: "admin" })];
    for (const [k, n] of [["gpu1", "gpu-1"], ["gpu2", "gpu-2"], ["gpu3", "gpu-3"]] as const) if (!without.includes(k)) lines.push(tokenLine(tokens[k], "node", { node: n, name: k }));
    await writeFile(tokensPath(), `${lines.join("\n")}\n`, { mode: 0o600 });
  };
  const register = async (nodeId: string, token: string, bootEpoch: bigint): Promise<void> => {
    const c = createClient(NodeService, coord.address, withToken(token));
    try {
      // An address nothing serves: the coordinator's dials fail, which this test does not look at.
      await c.register({ nodeId, address: "127.0.0.1:9", bootEpoch, version: wardenVersion, ramTotalBytes: 1n << 30n }, { timeoutMs: waitMs });
    } finally {
      c.close();
    }
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-hb-stream-"));
    await writeTokens();
    await writeFile(join(dir, "gpu-1.token"), `${tokens.gpu1}\n`, { mode: 0o600 });
    coord = await startCoordinatorProcess(join(dir, "c.json"), { listen: "127.0.0.1:0", stateDir: join(dir, "state"), embeddedAgent: false, recoveryWindow: 0, auth: { tokensFile: tokensPath() }, models: [simModel("m")] });
    admin = createClient(AdminService, coord.address, withToken(tokens.admin));
    gpu1 = await startRemoteAgent({ coordinator: coord.address, nodeId: "gpu-1", tag, config: { coordinatorTokenFile: join(dir, "gpu-1.token") } });
    await until("gpu-1 ready", async () => (await node(admin, "gpu-1")())?.state === NodeState.READY, waitMs);
  }, 120_000);

  afterAll(async () => {
    admin.close();
    await gpu1.cleanup();
    await coord.kill();
    await rm(dir, { recursive: true, force: true });
    expect(await liveRemoteAgents()).toEqual([]);
  }, 60_000);

  it("the agent sends its heartbeats on the stream, and the coordinator applies them", async () => {
    const first = heartbeatAtMs(await node(admin, "gpu-1")());
    await until("a later heartbeat from gpu-1", async () => heartbeatAtMs(await node(admin, "gpu-1")()) > first, waitMs);
    const lines = gpu1.proc.lines.map((l) => JSON.parse(l) as { msg?: string });
    expect(lines.some((l) => l.msg === "heartbeats on a HeartbeatStream")).toBe(true);
    expect(lines.filter((l) => l.msg === "coordinator call failed; retrying" || l.msg?.startsWith("the coordinator does not serve HeartbeatStream") === true)).toEqual([]);
  });

  it("a message naming another node on a node's stream ends it PERMISSION_DENIED naming node_id, and changes nothing", async () => {
    const epoch = BigInt(Date.now());
    await register("gpu-2", tokens.gpu2, epoch);
    await register("gpu-3", tokens.gpu3, epoch);
    const gpu2Before = heartbeatAtMs(await node(admin, "gpu-2")());
    const s = openStream(coord.address, tokens.gpu3);
    try {
      // Its own node first: answered as a heartbeat.
      s.send({ nodeId: "gpu-3", bootEpoch: epoch, sequence: 1n });
      expect((await s.next()).registerRequired).toBe(false);
      // Then gpu-2's, on gpu-3's stream.
      s.send({ nodeId: "gpu-2", bootEpoch: epoch, sequence: 1n });
      const err = await s.next().then(
        () => undefined,
        (e: unknown) => WardenError.from(e),
      );
      expect({ code: err?.code, field: err?.details.field }).toEqual({ code: Code.PermissionDenied, field: "node_id" });
      // gpu-2 never heard from: no heartbeat applied, not ready.
      const gpu2 = await node(admin, "gpu-2")();
      expect({ ready: gpu2?.state === NodeState.READY, heartbeatAtMs: heartbeatAtMs(gpu2) }).toEqual({ ready: false, heartbeatAtMs: gpu2Before });
      expect(heartbeatAtMs(await node(admin, "gpu-3")())).toBeGreaterThan(0);
    } finally {
      s.close();
    }
  });

  it("bytes that are not a heartbeat end the stream INVALID_ARGUMENT naming request, after the answer to the heartbeat before them", async () => {
    const epoch = BigInt(Date.now());
    await register("gpu-3", tokens.gpu3, epoch);
    // A client that writes bytes as given: the coordinator decodes each message in its turn, not on arrival.
    const raw = new RawClient(coord.address, credentials.createInsecure());
    const md = new Metadata();
    md.set("authorization", `Bearer ${tokens.gpu3}`);
    const identity = (b: Buffer): Buffer => b;
    const heartbeat = (sequence: bigint): Buffer => Buffer.from(toBinary(HeartbeatRequestSchema, create(HeartbeatRequestSchema, { nodeId: "gpu-3", bootEpoch: epoch, sequence })));
    // Field 1 (node_id) as a string that is not UTF-8.
    const junk = Buffer.from([0x0a, 0x01, 0xff]);
    try {
      const { answers, end } = await new Promise<{ answers: number; end: unknown }>((resolve) => {
        const call: ClientDuplexStream<Buffer, Buffer> = raw.makeBidiStreamRequest("/warden.v1.NodeService/HeartbeatStream", identity, identity, md, { deadline: Date.now() + waitMs });
        let answers = 0;
        call.on("data", () => {
          answers++;
          if (answers === 1) {
            call.write(junk);
            call.write(heartbeat(2n));
            call.end();
          }
        });
        call.on("error", (e: unknown) => {
          resolve({ answers, end: e });
        });
        call.on("end", () => {
          resolve({ answers, end: "ok" });
        });
        call.write(heartbeat(1n));
      });
      expect(answers).toBe(1);
      const e = fromGrpcError(end);
      expect({ code: e.code, field: e.details.field }).toEqual({ code: Code.InvalidArgument, field: "request" });
      expect(e.rawMessage).toMatch(/^request: is not a valid warden\.v1\.HeartbeatRequest/);
    } finally {
      raw.close();
    }
  });

  it("a reload that revokes the stream's token ends it UNAUTHENTICATED; another node's stream goes on", async () => {
    const epoch = BigInt(Date.now());
    await register("gpu-3", tokens.gpu3, epoch);
    const s = openStream(coord.address, tokens.gpu3);
    try {
      s.send({ nodeId: "gpu-3", bootEpoch: epoch, sequence: 1n });
      expect((await s.next()).registerRequired).toBe(false);
      // Waits on the stream with nothing sent: only the revocation can end it.
      let ended: Code | "answered" | undefined;
      void s.next().then(
        () => (ended = "answered"),
        (e: unknown) => (ended = WardenError.from(e).code),
      );
      const reloads = (): number => coord.logLines.filter((l) => l.msg === "config reloaded").length;
      const before = reloads();
      await writeTokens(["gpu3"]);
      coord.child.kill("SIGHUP");
      await until("the reload", () => reloads() > before, waitMs);
      await until("the revoked stream to end", () => ended !== undefined, waitMs);
      expect(ended).toBe(Code.Unauthenticated);
      expect(coord.logLines.some((l) => l.msg === "stream ended: its token no longer allows it" && l.what === "warden.v1.NodeService/HeartbeatStream")).toBe(true);
      // gpu-1's token was kept: its agent heartbeats on.
      const at = heartbeatAtMs(await node(admin, "gpu-1")());
      await until("a later heartbeat from gpu-1", async () => heartbeatAtMs(await node(admin, "gpu-1")()) > at, waitMs);
    } finally {
      s.close();
    }
  });
});

describe("HeartbeatStream, a coordinator without it", () => {
  let dir: string;
  let coord: CoordinatorProcess;
  let admin: Client<typeof AdminService>;
  let agent: RemoteAgent;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-hb-unary-"));
    coord = await startCoordinatorProcess(join(dir, "c.json"), { listen: "127.0.0.1:0", stateDir: join(dir, "state"), embeddedAgent: false, recoveryWindow: 0, heartbeatStream: false, models: [simModel("m")] });
    admin = createClient(AdminService, coord.address);
    agent = await startRemoteAgent({ coordinator: coord.address, nodeId: "old-1", tag });
  }, 120_000);

  afterAll(async () => {
    admin.close();
    await agent.cleanup();
    await coord.kill();
    await rm(dir, { recursive: true, force: true });
  }, 60_000);

  it("the agent falls back to unary heartbeats, which the coordinator applies", async () => {
    await until("old-1 ready", async () => (await node(admin, "old-1")())?.state === NodeState.READY, waitMs).catch((err: unknown) => {
      throw new Error(`${String(err)}; the agent logged: ${agent.proc.lines.slice(-20).join("\n")}`);
    });
    await until("the agent's fallback", () => agent.proc.lines.some((l) => (JSON.parse(l) as { msg?: string }).msg === "the coordinator does not serve HeartbeatStream; sending unary heartbeats"), waitMs);
    const at = heartbeatAtMs(await node(admin, "old-1")());
    await until("a later heartbeat from old-1", async () => heartbeatAtMs(await node(admin, "old-1")()) > at, waitMs);
    // Unary from then on: no failed call after the fallback.
    expect(agent.proc.lines.filter((l) => (JSON.parse(l) as { msg?: string }).msg === "coordinator call failed; retrying")).toEqual([]);
  });
});
