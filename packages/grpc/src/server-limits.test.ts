import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, constants as h2, type ClientHttp2Session, type ClientHttp2Stream } from "node:http2";
import { Code, isWardenError } from "@warden/common";
import { Backend } from "@warden/proto";
import { GrpcServer, LeanGrpcServer, createClient, createH2Client, defaultMaxConcurrentStreams, defaultMaxMessageBytes, sessionMemoryMiB, type ServiceImpl } from "./index.js";
import { echoBackend, newEchoBackendSeen } from "./echo-backend.fixture.js";
import { frameMessage } from "./h2-wire.js";

/*
 * Per-connection bounds of both servers (concurrent streams, the lean
 * server's session memory) and large messages and the 50 MiB limit through the
 * lean server.
 */

const mib = 1024 * 1024;
let predictCalls = 0;

/** Echo backend whose Predict answers `Tokens` bytes and counts `Prompt.length` in `tokens`. */
function sizedBackend(): ServiceImpl<typeof Backend> {
  return {
    ...echoBackend(newEchoBackendSeen()),
    async predict(req) {
      predictCalls++;
      return { message: new Uint8Array(req.Tokens), tokens: req.Prompt.length };
    },
  };
}

const lean = new LeanGrpcServer().add(Backend, sizedBackend());
const grpc = new GrpcServer().add(Backend, sizedBackend());
const at = { lean: "", grpc: "" };

beforeAll(async () => {
  at.lean = (await lean.listen("127.0.0.1:0")).address;
  at.grpc = (await grpc.listen("127.0.0.1:0")).address;
});
afterAll(async () => {
  await Promise.all([lean.shutdown(1000), grpc.shutdown(1000)]);
});

function remoteSettings(address: string): Promise<{ session: ClientHttp2Session; maxConcurrentStreams: number | undefined }> {
  return new Promise((resolve, reject) => {
    const session = connect(`http://${address}`);
    session.once("error", reject);
    session.once("remoteSettings", (s) => {
      resolve({ session, maxConcurrentStreams: s.maxConcurrentStreams });
    });
  });
}

/** A Predict on a raw HTTP/2 stream whose replies the caller does not read. */
function unreadPredict(session: ClientHttp2Session, replyBytes: number): ClientHttp2Stream {
  const stream = session.request({ ":method": "POST", ":path": "/backend.Backend/Predict", "content-type": "application/grpc", te: "trailers" });
  stream.on("error", () => undefined);
  stream.pause();
  // PredictOptions.Tokens (field 4, varint).
  const tokens: number[] = [];
  for (let v = replyBytes; ; v >>>= 7) {
    if (v < 0x80) {
      tokens.push(v);
      break;
    }
    tokens.push((v & 0x7f) | 0x80);
  }
  stream.end(frameMessage(Uint8Array.from([0x20, ...tokens]), mib, "request"));
  return stream;
}

function closed(stream: ClientHttp2Stream): Promise<number> {
  return new Promise((resolve) => {
    if (stream.closed) resolve(stream.rstCode);
    else stream.once("close", () => { resolve(stream.rstCode); });
  });
}

describe("server connection bounds", () => {
  it.each(["lean", "grpc"] as const)("the %s server advertises SETTINGS_MAX_CONCURRENT_STREAMS 256", async (which) => {
    const { session, maxConcurrentStreams } = await remoteSettings(at[which]);
    expect(maxConcurrentStreams).toBe(defaultMaxConcurrentStreams);
    expect(defaultMaxConcurrentStreams).toBe(256);
    session.destroy();
  });

  it("the lean server's maxConcurrentStreams option is what it advertises", async () => {
    const s = new LeanGrpcServer({ maxConcurrentStreams: 3 }).add(Backend, sizedBackend());
    const { session, maxConcurrentStreams } = await remoteSettings((await s.listen("127.0.0.1:0")).address);
    expect(maxConcurrentStreams).toBe(3);
    session.destroy();
    await s.shutdown(100);
  });

  it("session memory is bounded from the reply limit: replies stuck behind a reader that stopped refuse new streams on that connection only", async () => {
    const maxSend = mib;
    expect(sessionMemoryMiB(maxSend)).toBe(12);
    const s = new LeanGrpcServer({ maxSendMessageBytes: maxSend }).add(Backend, sizedBackend());
    const addr = (await s.listen("127.0.0.1:0")).address;
    const session = connect(`http://${addr}`);
    session.on("error", () => undefined);
    // 16 replies of ~1 MiB that nobody reads: past the 12 MiB bound once queued.
    predictCalls = 0;
    const stuck = Array.from({ length: 16 }, () => unreadPredict(session, maxSend - 64));
    await expect.poll(() => predictCalls, { timeout: 20_000 }).toBe(16);
    // Round trip on the same connection: the server has queued those replies before it reads the next stream.
    await new Promise<void>((resolve, reject) => session.ping((err) => { if (err === null) resolve(); else reject(err); }));
    const refused = unreadPredict(session, 1);
    const answered = new Promise<string>((resolve) => refused.once("response", () => { resolve("answered"); }));
    expect(await Promise.race([answered, closed(refused).then((rst) => `reset ${String(rst)}`)])).toBe(`reset ${String(h2.NGHTTP2_ENHANCE_YOUR_CALM)}`);
    // Another connection is not affected.
    const c = createH2Client(Backend, addr);
    expect((await c.predict({ Tokens: 3 })).message.length).toBe(3);
    c.close();
    for (const st of stuck) st.close(h2.NGHTTP2_CANCEL);
    session.destroy();
    await s.shutdown(100);
  });

  it("one largest reply stuck behind a reader that stopped leaves the connection open to other calls", async () => {
    const session = connect(`http://${at.lean}`);
    session.on("error", () => undefined);
    predictCalls = 0;
    const stuck = unreadPredict(session, 15 * mib);
    await expect.poll(() => predictCalls, { timeout: 20_000 }).toBe(1);
    await new Promise<void>((resolve, reject) => session.ping((err) => { if (err === null) resolve(); else reject(err); }));
    const next = session.request({ ":method": "POST", ":path": "/backend.Backend/Predict", "content-type": "application/grpc", te: "trailers" });
    let status = "";
    next.on("trailers", (t) => (status = String(t["grpc-status"])));
    next.on("data", () => undefined);
    next.end(frameMessage(Uint8Array.of(0x20, 0x02), mib, "request"));
    expect(await closed(next)).toBe(h2.NGHTTP2_NO_ERROR);
    expect(status).toBe("0");
    stuck.close(h2.NGHTTP2_CANCEL);
    session.destroy();
  });
});

describe("large messages and the 50 MiB limit through the lean server", () => {
  const prompt = "p".repeat(15 * mib);

  it.each([
    ["grpc-js client", () => createClient(Backend, at.lean)],
    ["lean h2 client", () => createH2Client(Backend, at.lean)],
  ] as const)("a 15 MiB request and a 15 MiB reply arrive whole (%s)", async (_name, client) => {
    const c = client();
    const r = await c.predict({ Prompt: prompt, Tokens: 15 * mib });
    expect(r.tokens).toBe(15 * mib);
    expect(r.message.length).toBe(15 * mib);
    c.close();
  });

  it("a request over the limit is RESOURCE_EXHAUSTED and the connection goes on serving", async () => {
    const c = createClient(Backend, at.lean);
    const err = await c.predict({ Prompt: "p".repeat(defaultMaxMessageBytes + 1) }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.ResourceExhausted)).toBe(true);
    expect((await c.predict({ Prompt: "ok" })).tokens).toBe(2);
    c.close();
  });
});
