import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect as netConnect, createServer, type Socket } from "node:net";
import type { DescService } from "@bufbuild/protobuf";
import { Code, WardenError, isNotLeader, isWardenError, notLeaderError, systemClock, type Clock } from "@warden/common";
import { AdminService, EventSchema } from "@warden/proto";
import { create } from "@bufbuild/protobuf";
import { GrpcServer, createClient, createH2Client, createLeaderFollowingClient, withUnimplemented, type Client, type HandlerContext, type ServiceImpl } from "./index.js";

/** A port that was bound a moment ago and is closed now: nobody listens there. */
function closedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => {
        resolve(typeof a === "object" && a !== null ? a.port : 0);
      });
    });
  });
}

/**
 * A TCP relay in front of `target`: `cut()` destroys every relayed socket and
 * stops listening, which is what a coordinator killed with SIGKILL looks like
 * to its clients (a connection reset, no HTTP/2 GOAWAY or stream reset).
 */
async function relay(target: string): Promise<{ address: string; cut: () => void }> {
  const sockets = new Set<Socket>();
  const colon = target.lastIndexOf(":");
  const srv = createServer((inbound) => {
    const outbound = netConnect({ host: target.slice(0, colon), port: Number(target.slice(colon + 1)) });
    for (const s of [inbound, outbound]) {
      sockets.add(s);
      s.on("error", () => undefined);
      s.on("close", () => sockets.delete(s));
    }
    inbound.pipe(outbound);
    outbound.pipe(inbound);
  });
  const port = await new Promise<number>((resolve) => {
    srv.listen(0, "127.0.0.1", () => {
      const a = srv.address();
      resolve(typeof a === "object" && a !== null ? a.port : 0);
    });
  });
  return {
    address: `127.0.0.1:${String(port)}`,
    cut: () => {
      srv.close();
      for (const s of sockets) s.resetAndDestroy();
    },
  };
}

/** Every method of `svc` answers a standby's refusal naming `hint`; counts the calls it refused. */
function refusingImpl<T extends DescService>(svc: T, hint: () => string | undefined, calls: { n: number }): ServiceImpl<T> {
  const out: Record<string, unknown> = {};
  for (const m of svc.methods) {
    const refuse = (): WardenError => {
      calls.n++;
      return notLeaderError(hint());
    };
    out[m.localName] =
      m.methodKind === "server_streaming" || m.methodKind === "bidi_streaming"
        ? () => ({ [Symbol.asyncIterator]: () => ({ next: () => Promise.reject(refuse()) }) })
        : () => Promise.reject(refuse());
  }
  return out as ServiceImpl<T>;
}

interface Counts {
  listModels: number;
  loadModel: number;
  watchEvents: number;
}

/** Resolves once the call's signal fires (cancel, deadline, or the server going away). */
function aborted(ctx: HandlerContext): Promise<void> {
  return new Promise((resolve) => {
    if (ctx.signal.aborted) resolve();
    ctx.signal.addEventListener("abort", () => { resolve(); }, { once: true });
  });
}

/** A serving coordinator stand-in: counts executions; `hang` makes LoadModel/ListModels block until the call ends (entered resolves first). */
function leaderImpl(counts: Counts, name: string, o: { hang?: boolean; entered?: () => void } = {}): ServiceImpl<typeof AdminService> {
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
    async *watchEvents() {
      counts.watchEvents++;
      yield { event: create(EventSchema, { id: `${name}-1` }) };
    },
  });
}

const zero = (): Counts => ({ listModels: 0, loadModel: 0, watchEvents: 0 });

const servers: GrpcServer[] = [];
async function serve(impl: ServiceImpl<typeof AdminService>): Promise<{ server: GrpcServer; address: string }> {
  const server = new GrpcServer();
  server.add(AdminService, impl);
  servers.push(server);
  return { server, address: (await server.listen("127.0.0.1:0")).address };
}

const transports: { name: string; connect: (a: string) => Client<typeof AdminService> }[] = [
  { name: "grpc-js", connect: (a) => createClient(AdminService, a) },
  { name: "lean h2", connect: (a) => createH2Client(AdminService, a) },
];

let leader: { address: string; counts: Counts };
let standby: { address: string; refused: { n: number } };
/** A second standby that knows no leader: counts what reaches it. */
let bystander: { address: string; refused: { n: number } };
/** Another serving server that no caller lists: a hostile hint's target. */
let outsider: { address: string; counts: Counts };
let hostile: { address: string; refused: { n: number } };
let dead: string;

beforeAll(async () => {
  const lc = zero();
  leader = { address: (await serve(leaderImpl(lc, "leader"))).address, counts: lc };
  const oc = zero();
  outsider = { address: (await serve(leaderImpl(oc, "outsider"))).address, counts: oc };
  const sr = { n: 0 };
  standby = { address: (await serve(refusingImpl(AdminService, () => leader.address, sr))).address, refused: sr };
  const br = { n: 0 };
  bystander = { address: (await serve(refusingImpl(AdminService, () => undefined, br))).address, refused: br };
  const hr = { n: 0 };
  hostile = { address: (await serve(refusingImpl(AdminService, () => outsider.address, hr))).address, refused: hr };
  dead = `127.0.0.1:${String(await closedPort())}`;
});

afterAll(async () => {
  await Promise.all(servers.map((s) => s.shutdown(0)));
});

describe.each(transports)("createLeaderFollowingClient over $name", ({ connect }) => {
  it("follows a standby's hint to the leader (skipping the next listed address) and stays there", async () => {
    const changes: string[] = [];
    const c = createLeaderFollowingClient(AdminService, [standby.address, bystander.address, leader.address], { connect, onLeaderChange: (a) => changes.push(a) });
    const before = { leader: leader.counts.loadModel, bystander: bystander.refused.n, standby: standby.refused.n };
    const r = await c.loadModel({ model: "m" }, { timeoutMs: 30_000 });
    expect(r.instance?.nodeId).toBe("leader");
    expect(leader.counts.loadModel - before.leader).toBe(1);
    expect(bystander.refused.n - before.bystander).toBe(0);
    expect(c.currentAddress()).toBe(leader.address);
    expect(changes).toEqual([leader.address]);
    // Next call goes straight to the leader: the standby sees nothing more.
    await c.listModels({}, { timeoutMs: 30_000 });
    expect(standby.refused.n - before.standby).toBe(1);
    c.close();
  });

  it("ignores a hint outside the caller's list and tries its own next address", async () => {
    const ignored: string[] = [];
    const c = createLeaderFollowingClient(AdminService, [hostile.address, leader.address], { connect, onIgnoredHint: (h) => ignored.push(h) });
    const before = outsider.counts.loadModel;
    const r = await c.loadModel({ model: "m" }, { timeoutMs: 30_000 });
    expect(r.instance?.nodeId).toBe("leader");
    expect(outsider.counts.loadModel).toBe(before);
    expect(ignored).toEqual([outsider.address]);
    c.close();
  });

  it("skips a dead address even for a non-idempotent call (it was never sent)", async () => {
    const c = createLeaderFollowingClient(AdminService, [dead, leader.address], { connect });
    const before = leader.counts.loadModel;
    const r = await c.loadModel({ model: "m" }, { timeoutMs: 30_000 });
    expect(r.instance?.nodeId).toBe("leader");
    expect(leader.counts.loadModel - before).toBe(1);
    c.close();
  });

  it("surfaces the last refusal when no address leads, without sleeping past the deadline", async () => {
    // A backoff far longer than the test's own timeout: only the deadline check ends the call in time.
    let slept = 0;
    const clock: Clock = { now: () => systemClock.now(), wallNow: () => systemClock.wallNow(), setTimer: (ms, fn) => { slept += ms; return systemClock.setTimer(ms, fn); } };
    const c = createLeaderFollowingClient(AdminService, [bystander.address, dead], { connect, clock, maxRounds: 10, backoff: { initialMs: 3_600_000, factor: 1, maxMs: 3_600_000, jitter: 0 } });
    const err = await c.listModels({}, { timeoutMs: 20_000 }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.Unavailable)).toBe(true);
    expect(slept).toBe(0);
    c.close();
  });

  it("a standby's refusal everywhere surfaces as not-leader after the bounded rounds", async () => {
    const c = createLeaderFollowingClient(AdminService, [bystander.address], { connect, maxRounds: 2, backoff: { initialMs: 1, factor: 1, maxMs: 1, jitter: 0 } });
    const before = bystander.refused.n;
    const err = await c.listModels({}).catch((e: unknown) => e);
    expect(isNotLeader(err)).toBe(true);
    expect(bystander.refused.n - before).toBe(2);
    c.close();
  });

  it("a deadline that fires on a hung address surfaces DEADLINE_EXCEEDED and tries nothing else", async () => {
    const hungCounts = zero();
    const hung = await serve(leaderImpl(hungCounts, "hung", { hang: true }));
    const c = createLeaderFollowingClient(AdminService, [hung.address, leader.address], { connect });
    const before = leader.counts.listModels;
    const err = await c.listModels({}, { timeoutMs: 300 }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.DeadlineExceeded)).toBe(true);
    expect(leader.counts.listModels).toBe(before);
    expect(hungCounts.listModels).toBe(1);
    // The next call starts past the hung address (a frozen leader does not hold every later call).
    expect(c.currentAddress()).toBe(leader.address);
    expect((await c.listModels({}, { timeoutMs: 30_000 })).instances[0]?.nodeId).toBe("leader");
    expect(hungCounts.listModels).toBe(1);
    c.close();
  });

  it("a non-idempotent call cut mid-flight surfaces UNAVAILABLE and is not re-sent; a read is", async () => {
    let entered = (): void => {};
    const dyingCounts = zero();
    const dying = await serve(leaderImpl(dyingCounts, "dying", { hang: true, entered: () => { entered(); } }));
    const nextCounts = zero();
    const next = await serve(leaderImpl(nextCounts, "next"));
    const dyingLink = await relay(dying.address);
    const c = createLeaderFollowingClient(AdminService, [dyingLink.address, next.address], { connect });
    const inside = new Promise<void>((r) => (entered = r));
    const call = c.loadModel({ model: "m" }, { timeoutMs: 60_000 }).catch((e: unknown) => e);
    await inside;
    dyingLink.cut();
    const err = await call;
    expect(err, String(err)).toBeInstanceOf(WardenError);
    expect((err as WardenError).code, (err as WardenError).message).toBe(Code.Unavailable);
    expect(isNotLeader(err)).toBe(false);
    expect(dyingCounts.loadModel).toBe(1);
    expect(nextCounts.loadModel).toBe(0);
    // Not re-sent, but the next call starts at the other address.
    expect(c.currentAddress()).toBe(next.address);
    // The same cut on a read (ListModels) moves on: it is safe to run twice.
    const dying2Counts = zero();
    const dying2 = await serve(leaderImpl(dying2Counts, "dying2", { hang: true, entered: () => { entered(); } }));
    const dying2Link = await relay(dying2.address);
    const c2 = createLeaderFollowingClient(AdminService, [dying2Link.address, next.address], { connect });
    const inside2 = new Promise<void>((r) => (entered = r));
    const read = c2.listModels({}, { timeoutMs: 60_000 });
    await inside2;
    dying2Link.cut();
    expect((await read).instances[0]?.nodeId).toBe("next");
    expect(nextCounts.listModels).toBe(1);
    c.close();
    c2.close();
  });

  it("a server stream follows the hint before its first message", async () => {
    const c = createLeaderFollowingClient(AdminService, [standby.address, leader.address], { connect });
    const ids: string[] = [];
    for await (const e of c.watchEvents({}, { timeoutMs: 30_000 })) ids.push(e.event?.id ?? "");
    expect(ids).toEqual(["leader-1"]);
    expect(c.currentAddress()).toBe(leader.address);
    c.close();
  });
});

describe("createLeaderFollowingClient addresses", () => {
  it("takes 1..8 host:port addresses without duplicates", () => {
    expect(() => createLeaderFollowingClient(AdminService, [])).toThrow(/at least one/);
    expect(() => createLeaderFollowingClient(AdminService, "a:1,a:1")).toThrow(/listed twice/);
    expect(() => createLeaderFollowingClient(AdminService, "a:1,http://b:2")).toThrow(/without a scheme/);
    expect(() => createLeaderFollowingClient(AdminService, Array.from({ length: 9 }, (_, i) => `h:${String(i + 1)}`))).toThrow(/at most 8/);
    const c = createLeaderFollowingClient(AdminService, "a:1, b:2", { connect: (a) => createH2Client(AdminService, a) });
    expect(c.addresses).toEqual(["a:1", "b:2"]);
    c.close();
  });
});
