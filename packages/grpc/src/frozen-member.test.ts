import { afterAll, describe, expect, it } from "vitest";
import { connect as netConnect, createServer, type Server, type Socket } from "node:net";
import { create } from "@bufbuild/protobuf";
import { Code, WardenError, isNotLeader, isWardenError, notLeaderError } from "@warden/common";
import { AdminService, EventSchema } from "@warden/proto";
import { GrpcServer, callNeverSent, createH2Client, createLeaderFollowingClient, followDecision, serverWasSilent, unresponsiveTransport, withUnimplemented, type Client, type HandlerContext, type ServiceImpl } from "./index.js";

/**
 * A member frozen by SIGSTOP, as its clients see it: the kernel still accepts
 * TCP connections and takes their bytes, but nothing ever answers — no HTTP/2
 * SETTINGS, no PING, no response. The leader-following client must bound each
 * attempt by its liveness bound (answerWithinMs, short here), not by the
 * call's deadline (long here: a call stuck on the frozen member would end
 * DEADLINE_EXCEEDED after it).
 */

const listeners: Server[] = [];
const servers: GrpcServer[] = [];
afterAll(async () => {
  for (const l of listeners) l.close();
  await Promise.all(servers.map((s) => s.shutdown(0)));
});

async function listen(srv: Server): Promise<string> {
  listeners.push(srv);
  const port = await new Promise<number>((resolve) => {
    srv.listen(0, "127.0.0.1", () => {
      const a = srv.address();
      resolve(typeof a === "object" && a !== null ? a.port : 0);
    });
  });
  return `127.0.0.1:${String(port)}`;
}

/** Accepts connections, keeps every byte it is sent, answers nothing. */
async function silentAcceptor(): Promise<{ address: string; received: () => Buffer; connections: () => number }> {
  const chunks: Buffer[] = [];
  let connections = 0;
  const srv = createServer((s) => {
    connections++;
    s.on("data", (d: Buffer) => chunks.push(d));
    s.on("error", () => undefined);
  });
  return { address: await listen(srv), received: () => Buffer.concat(chunks), connections: () => connections };
}

/** The HTTP/2 frame types in what a client sent (after the 24-byte connection preface). */
function frameTypes(bytes: Buffer): number[] {
  const types: number[] = [];
  for (let at = 24; at + 9 <= bytes.length; at += 9 + bytes.readUIntBE(at, 3)) types.push(bytes[at + 3] ?? -1);
  return types;
}
const headersFrame = 0x1;

/** A TCP relay in front of `target`; `freeze()` stops it relaying either way, as a SIGSTOPped target would. */
async function freezableRelay(target: string): Promise<{ address: string; freeze: () => void }> {
  const pairs: [Socket, Socket][] = [];
  const colon = target.lastIndexOf(":");
  const srv = createServer((inbound) => {
    const outbound = netConnect({ host: target.slice(0, colon), port: Number(target.slice(colon + 1)) });
    for (const s of [inbound, outbound]) s.on("error", () => undefined);
    inbound.pipe(outbound);
    outbound.pipe(inbound);
    pairs.push([inbound, outbound]);
  });
  return {
    address: await listen(srv),
    freeze: () => {
      for (const [i, o] of pairs) {
        i.unpipe(o);
        o.unpipe(i);
        i.pause();
        o.pause();
      }
    },
  };
}

interface Counts {
  listModels: number;
  loadModel: number;
}

function aborted(ctx: HandlerContext): Promise<void> {
  return new Promise((resolve) => {
    if (ctx.signal.aborted) resolve();
    ctx.signal.addEventListener("abort", () => { resolve(); }, { once: true });
  });
}

function impl(counts: Counts, name: string, o: { hang?: boolean; entered?: () => void; streamOpen?: boolean } = {}): ServiceImpl<typeof AdminService> {
  return withUnimplemented(AdminService, {
    async listModels(_req, ctx) {
      counts.listModels++;
      if (o.hang === true) {
        o.entered?.();
        await aborted(ctx);
      }
      return { instances: [{ nodeId: name }] };
    },
    async loadModel(req, ctx) {
      counts.loadModel++;
      if (o.hang === true) {
        o.entered?.();
        await aborted(ctx);
      }
      return { instance: { nodeId: name, model: req.model } };
    },
    async *watchEvents(_req, ctx) {
      yield { event: create(EventSchema, { id: `${name}-1` }) };
      // A follower's stream: open until the client leaves.
      if (o.streamOpen === true) await aborted(ctx);
    },
  });
}

async function serve(i: ServiceImpl<typeof AdminService>): Promise<string> {
  const server = new GrpcServer();
  server.add(AdminService, i);
  servers.push(server);
  return (await server.listen("127.0.0.1:0")).address;
}

const connect = (a: string): ReturnType<typeof createH2Client<typeof AdminService>> => createH2Client(AdminService, a);
const answerWithinMs = 1_000;
const longDeadlineMs = 30_000;

describe("the leader-following client and a frozen member (lean h2 client)", { timeout: 60_000 }, () => {
  it("a frozen member listed first: a read, a write and a server stream go to the next address, and the frozen one never got a request", async () => {
    const frozen = await silentAcceptor();
    const counts = { listModels: 0, loadModel: 0 };
    const leader = await serve(impl(counts, "leader"));
    const c = createLeaderFollowingClient(AdminService, [frozen.address, leader], { connect, answerWithinMs });
    expect((await c.listModels({}, { timeoutMs: longDeadlineMs })).instances[0]?.nodeId).toBe("leader");
    // A fresh client: the write's first attempt is the frozen member too.
    const w = createLeaderFollowingClient(AdminService, [frozen.address, leader], { connect, answerWithinMs });
    expect((await w.loadModel({ model: "m" }, { timeoutMs: longDeadlineMs })).instance?.nodeId).toBe("leader");
    const s = createLeaderFollowingClient(AdminService, [frozen.address, leader], { connect, answerWithinMs });
    const ids: string[] = [];
    for await (const e of s.watchEvents({}, { timeoutMs: longDeadlineMs })) ids.push(e.event?.id ?? "");
    expect(ids).toEqual(["leader-1"]);
    expect(counts).toEqual({ listModels: 1, loadModel: 1 });
    // It was dialled (the preface and SETTINGS reached it) but no call was sent: it cannot run one on SIGCONT.
    expect(frozen.received().length).toBeGreaterThan(0);
    expect(frameTypes(frozen.received())).not.toContain(headersFrame);
    for (const x of [c, w, s]) x.close();
  });

  it("a member that freezes with a write in flight: UNAVAILABLE saying it did not answer, not re-sent; a read in flight moves on", async () => {
    let entered = (): void => {};
    const hungCounts = { listModels: 0, loadModel: 0 };
    const hung = await serve(impl(hungCounts, "frozen", { hang: true, entered: () => { entered(); } }));
    const nextCounts = { listModels: 0, loadModel: 0 };
    const next = await serve(impl(nextCounts, "next"));
    const link = await freezableRelay(hung);
    const c = createLeaderFollowingClient(AdminService, [link.address, next], { connect, answerWithinMs });
    const inside = new Promise<void>((r) => (entered = r));
    const write = c.loadModel({ model: "m" }, { timeoutMs: longDeadlineMs }).catch((e: unknown) => e);
    await inside;
    link.freeze();
    const err = await write;
    expect(err, String(err)).toBeInstanceOf(WardenError);
    expect((err as WardenError).code, (err as WardenError).message).toBe(Code.Unavailable);
    expect((err as WardenError).details["transport"]).toBe(unresponsiveTransport);
    expect((err as WardenError).message).toContain("did not answer");
    expect(hungCounts.loadModel).toBe(1);
    expect(nextCounts.loadModel).toBe(0);
    expect(c.currentAddress()).toBe(next);

    const link2 = await freezableRelay(hung);
    const c2 = createLeaderFollowingClient(AdminService, [link2.address, next], { connect, answerWithinMs });
    const inside2 = new Promise<void>((r) => (entered = r));
    const read = c2.listModels({}, { timeoutMs: longDeadlineMs });
    await inside2;
    link2.freeze();
    expect((await read).instances[0]?.nodeId).toBe("next");
    c.close();
    c2.close();
  });

  it("a frozen member costs its bound once: later rounds skip it while a standby answers, and a hint naming it is not followed", async () => {
    const frozen = await silentAcceptor();
    const refused = { n: 0 };
    const standby = await serve(
      withUnimplemented(AdminService, {
        listModels() {
          refused.n++;
          return Promise.reject(notLeaderError(frozen.address));
        },
      }),
    );
    const c = createLeaderFollowingClient(AdminService, [frozen.address, standby], { connect, answerWithinMs, maxRounds: 4, backoff: { initialMs: 1, factor: 1, maxMs: 1, jitter: 0 } });
    const err = await c.listModels({}, { timeoutMs: longDeadlineMs }).catch((e: unknown) => e);
    expect(isNotLeader(err), String(err)).toBe(true);
    expect(refused.n).toBe(4);
    expect(frozen.connections()).toBe(1);
    c.close();
  });

  it("a standby's refusal is surfaced over a dead address's connection error: the caller (an agent) retries at its first step", async () => {
    const dead = await listen(createServer());
    listeners.pop()?.close();
    const standby = await serve(
      withUnimplemented(AdminService, {
        listModels() {
          return Promise.reject(notLeaderError(dead));
        },
      }),
    );
    const c = createLeaderFollowingClient(AdminService, [standby, dead], { connect, answerWithinMs, maxRounds: 2, backoff: { initialMs: 1, factor: 1, maxMs: 1, jitter: 0 } });
    const err = await c.listModels({}, { timeoutMs: longDeadlineMs }).catch((e: unknown) => e);
    expect(isNotLeader(err), String(err)).toBe(true);
    c.close();
  });

  it("a refused connection is not held against a member: a standby becoming leader is followed as soon as it serves", async () => {
    const next = await listen(createServer());
    listeners.pop()?.close();
    const standby = await serve(
      withUnimplemented(AdminService, {
        listModels() {
          return Promise.reject(notLeaderError(next));
        },
      }),
    );
    const c = createLeaderFollowingClient(AdminService, [standby, next], { connect, answerWithinMs, maxRounds: 1 });
    expect(isNotLeader(await c.listModels({}, { timeoutMs: longDeadlineMs }).catch((e: unknown) => e))).toBe(true);
    // The named leader serves now (its takeover done): the very next call reaches it.
    const counts = { listModels: 0, loadModel: 0 };
    const server = new GrpcServer();
    server.add(AdminService, impl(counts, "next"));
    servers.push(server);
    await server.listen(next);
    expect((await c.listModels({}, { timeoutMs: longDeadlineMs })).instances[0]?.nodeId).toBe("next");
    c.close();
  });

  it("the retry rule: unresponsive after sending is followed for reads only; not answering before sending is never-sent", () => {
    const unresponsive = new WardenError(Code.Unavailable, "did not answer", { details: { transport: unresponsiveTransport } });
    expect(followDecision(unresponsive, true)).toBe("follow");
    expect(followDecision(unresponsive, false)).toBe("surface");
    expect(callNeverSent(unresponsive)).toBe(false);
    expect(isWardenError(unresponsive, Code.Unavailable)).toBe(true);
  });
});

describe.each([
  { name: "grpc-js, the default", connect: undefined },
  { name: "lean h2", connect: (a: string): Client<typeof AdminService> => createH2Client(AdminService, a) },
])("a frozen member, whichever client each address gets ($name)", { timeout: 60_000 }, ({ connect: perAddress }) => {
  const options = perAddress === undefined ? { answerWithinMs } : { connect: perAddress, answerWithinMs };

  it("listed first: a read and a write go to the next address, and the frozen one never got a request", async () => {
    const frozen = await silentAcceptor();
    const counts = { listModels: 0, loadModel: 0 };
    const leader = await serve(impl(counts, "leader"));
    const r = createLeaderFollowingClient(AdminService, [frozen.address, leader], options);
    expect((await r.listModels({}, { timeoutMs: longDeadlineMs })).instances[0]?.nodeId).toBe("leader");
    const w = createLeaderFollowingClient(AdminService, [frozen.address, leader], options);
    expect((await w.loadModel({ model: "m" }, { timeoutMs: longDeadlineMs })).instance?.nodeId).toBe("leader");
    expect(counts).toEqual({ listModels: 1, loadModel: 1 });
    expect(frameTypes(frozen.received())).not.toContain(headersFrame);
    r.close();
    w.close();
  });

  it("freezing after a stream's first message: the stream ends UNAVAILABLE (silent) instead of hanging, and the next call starts at the other address", async () => {
    const counts = { listModels: 0, loadModel: 0 };
    const streaming = await serve(impl(counts, "first", { streamOpen: true }));
    const next = await serve(impl({ listModels: 0, loadModel: 0 }, "next"));
    const link = await freezableRelay(streaming);
    const c = createLeaderFollowingClient(AdminService, [link.address, next], options);
    const ids: string[] = [];
    const ended = (async () => {
      for await (const e of c.watchEvents({}, { timeoutMs: longDeadlineMs })) {
        ids.push(e.event?.id ?? "");
        link.freeze();
      }
    })().then(
      () => undefined,
      (e: unknown) => e,
    );
    const err = await ended;
    expect(ids).toEqual(["first-1"]);
    expect(serverWasSilent(err), String(err)).toBe(true);
    expect(c.currentAddress()).toBe(next);
    expect((await c.listModels({}, { timeoutMs: longDeadlineMs })).instances[0]?.nodeId).toBe("next");
    c.close();
  });
});

it("a following client over grpc-js with opaque credentials is refused at construction, naming the field (its liveness check needs the TLS as `tls`)", () => {
  expect(() => createLeaderFollowingClient(AdminService, ["a:1"], { clientOptions: { credentials: {} as never } })).toThrow(/clientOptions\.credentials/);
});
