/**
 * The documented bounds, one table: for each, a value just inside is
 * accepted and one just outside is refused with a status naming the field
 * (or limit), and a refusal changes nothing (ListNodes / ListModels as
 * before). One real coordinator with small configured `limits:` over real
 * loopback gRPC, and the gRPC servers on their own for the transport bounds.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { Metadata } from "@grpc/grpc-js";
import { Code, maxIdentifierChars } from "@warden/common";
import { GrpcServer, LeanGrpcServer, createClient, createH2Client, defaultMaxMessageBytes, defaultMaxMetadataBytes, defaultMaxRequestElements, type ServiceImpl } from "@warden/grpc";
import { AdminService, Backend, BackendState, NodeService, PredictOptionsSchema, type HeartbeatRequestSchema } from "@warden/proto";
import { simModel, startTestCoordinator, type TestCoordinator } from "./support/coordinator-harness.js";
import { frame, RawGrpc } from "./support/raw-grpc.js";
import { refusal } from "./support/refusal.js";

describe("transport bounds on every server and client", () => {
  const limit = 64 * 1024;
  const impl: Partial<ServiceImpl<typeof Backend>> = {
    async predict(req) {
      // A reply of the size the caller asks for, to probe the send limit.
      return { message: new Uint8Array(req.Tokens) };
    },
  };
  const full = new Proxy(impl, { get: (o, k) => (o as Record<string | symbol, unknown>)[k] ?? (async () => ({})) }) as ServiceImpl<typeof Backend>;
  let grpcJs: GrpcServer;
  let lean: LeanGrpcServer;
  const at = { grpcJs: "", lean: "" };
  beforeAll(async () => {
    grpcJs = new GrpcServer({ maxReceiveMessageBytes: limit, maxSendMessageBytes: limit, maxMetadataBytes: 2048 }).add(Backend, full);
    at.grpcJs = (await grpcJs.listen("127.0.0.1:0")).address;
    lean = new LeanGrpcServer({ maxReceiveMessageBytes: limit, maxSendMessageBytes: limit, maxMetadataBytes: 2048 }).add(Backend, full);
    at.lean = (await lean.listen("127.0.0.1:0")).address;
  });
  afterAll(async () => {
    await grpcJs.shutdown(500);
    await lean.shutdown(500);
  });

  /** A Predict request whose encoding is exactly `bytes` long. */
  function promptOf(bytes: number): string {
    let n = bytes - 4;
    while (toBinary(PredictOptionsSchema, create(PredictOptionsSchema, { Prompt: "p".repeat(n) })).length > bytes) n--;
    while (toBinary(PredictOptionsSchema, create(PredictOptionsSchema, { Prompt: "p".repeat(n + 1) })).length <= bytes) n++;
    return "p".repeat(n);
  }

  /** The bytes payload whose Reply encodes to exactly `bytes` (tag, varint length, payload). */
  function replyOf(bytes: number): number {
    const varintLen = (n: number): number => (n < 128 ? 1 : n < 16_384 ? 2 : 3);
    let n = bytes - 4;
    while (1 + varintLen(n + 1) + n + 1 <= bytes) n++;
    return n;
  }

  it("defaults: 50 MiB messages (LocalAI's), 16 KiB metadata, 100 000 decoded elements", () => {
    expect(defaultMaxMessageBytes).toBe(50 * 1024 * 1024);
    expect(defaultMaxMetadataBytes).toBe(16 * 1024);
    expect(defaultMaxRequestElements).toBe(100_000);
  });

  it.each(["grpcJs", "lean"] as const)("maxMessageSize on the %s server: a request and a reply of exactly the limit pass, one byte more is RESOURCE_EXHAUSTED", async (server) => {
    // The client's own limits are larger, so the server is what refuses.
    const clients = [createClient(Backend, at[server], { maxReceiveMessageBytes: 2 * limit, maxSendMessageBytes: 2 * limit }), createH2Client(Backend, at[server], { maxReceiveMessageBytes: 2 * limit, maxSendMessageBytes: 2 * limit })];
    try {
      for (const c of clients) {
        expect((await c.predict({ Prompt: promptOf(limit) })).message.length).toBe(0);
        expect(await refusal(c.predict({ Prompt: promptOf(limit + 1) }))).toMatchObject({ code: Code.ResourceExhausted });
        // Reply: bytes field (tag + varint length) + payload = the limit exactly.
        expect((await c.predict({ Tokens: replyOf(limit) })).message.length).toBe(replyOf(limit));
        expect(await refusal(c.predict({ Tokens: replyOf(limit) + 1 }))).toMatchObject({ code: Code.ResourceExhausted });
        expect((await c.predict({ Prompt: "still serving" })).message.length).toBe(0);
      }
    } finally {
      for (const c of clients) c.close();
    }
  });

  it.each(["grpcJs", "lean"] as const)("maxMessageSize on clients (%s server): the client refuses to send or receive past its own limit", async (server) => {
    const small = 16 * 1024;
    const clients = [createClient(Backend, at[server], { maxReceiveMessageBytes: small, maxSendMessageBytes: small }), createH2Client(Backend, at[server], { maxReceiveMessageBytes: small, maxSendMessageBytes: small })];
    try {
      for (const c of clients) {
        expect((await c.predict({ Prompt: promptOf(small) })).message.length).toBe(0);
        expect(await refusal(c.predict({ Prompt: promptOf(small + 1) }))).toMatchObject({ code: Code.ResourceExhausted });
        expect((await c.predict({ Tokens: replyOf(small) })).message.length).toBe(replyOf(small));
        expect(await refusal(c.predict({ Tokens: replyOf(small) + 1 }))).toMatchObject({ code: Code.ResourceExhausted });
      }
    } finally {
      for (const c of clients) c.close();
    }
  });

  it.each(["grpcJs", "lean"] as const)("maxMetadataSize on the %s server: metadata under the limit passes, over it is RESOURCE_EXHAUSTED naming metadata", async (server) => {
    const c = createClient(Backend, at[server]);
    try {
      const md = (bytes: number): Metadata => {
        const m = new Metadata();
        m.set("x-pad", "v".repeat(bytes));
        return m;
      };
      // The client's own headers (path, user agent, te, …) take a few hundred bytes of the 2 KiB.
      expect((await c.predict({}, { metadata: md(1024) })).message.length).toBe(0);
      expect(await refusal(c.predict({}, { metadata: md(2048) }))).toMatchObject({ code: Code.ResourceExhausted, field: "metadata" });
      expect((await c.predict({}, { metadata: md(1024) })).message.length).toBe(0);
    } finally {
      c.close();
    }
  });

  it.each(["grpcJs", "lean"] as const)("decoded elements on the %s server: 100 000 repeated entries decode, 100 001 are RESOURCE_EXHAUSTED naming the request", async (server) => {
    // Default limits: 300 KB of entries is far under the 50 MiB message limit.
    const s = server === "grpcJs" ? new GrpcServer().add(Backend, full) : new LeanGrpcServer().add(Backend, full);
    const raw = new RawGrpc((await s.listen("127.0.0.1:0")).address);
    try {
      // PredictOptions.Messages (repeated Message = 44 on upstream; here any repeated field works): empty entries.
      const field = PredictOptionsSchema.fields.find((f) => f.fieldKind === "list" && f.listKind === "scalar");
      if (field === undefined) throw new Error("PredictOptions has no repeated scalar field");
      const body = (n: number): Buffer => {
        const tag = field.number < 16 ? [(field.number << 3) | 2] : [((field.number << 3) | 2) & 0x7f | 0x80, (field.number << 3) >> 7];
        const one = Buffer.from([...tag, 0]);
        return frame(Buffer.concat(Array.from({ length: n }, () => one)));
      };
      // Under the message limit either way (2–3 bytes an entry) so only the element budget differs.
      expect((await raw.call("/backend.Backend/Predict", body(defaultMaxRequestElements), { timeoutMs: 60_000 })).status).toBe(0);
      const over = await raw.call("/backend.Backend/Predict", body(defaultMaxRequestElements + 1), { timeoutMs: 60_000 });
      expect(over.status).toBe(Code.ResourceExhausted);
      expect(over.message).toContain("request:");
    } finally {
      raw.close();
      await s.shutdown(500);
    }
  });
});

describe("coordinator caps and identifiers (limits: configured small)", () => {
  let t: TestCoordinator;
  let node: ReturnType<typeof createClient<typeof NodeService>>;
  const bootEpoch = 1_750_000_000_000n;

  beforeAll(async () => {
    // nodeGrace 1h: the test's nodes heartbeat by hand, and "nothing changes" must not see one turn
    // unreachable because a loaded machine took longer than the default grace between two reads.
    t = await startTestCoordinator({
      models: [simModel("m"), simModel("m2"), simModel("m3")],
      extra: { limits: { maxNodes: 3, maxInventoryPerHeartbeat: 2, maxOrphansPerHeartbeat: 2, maxWatchersPerCaller: 2, maxWatchers: 4 }, orphanGrace: "1h", nodeGrace: "1h" },
    });
    node = createClient(NodeService, t.c.address);
  });
  afterAll(async () => {
    node.close();
    await t.close();
  });

  const state = async () => ({
    nodes: (await t.admin.listNodes({})).nodes.map((n) => ({ id: n.nodeId, address: n.address, state: n.state })),
    models: (await t.admin.listModels({})).instances.map((i) => ({ node: i.nodeId, model: i.model, incarnation: i.incarnation, state: i.state })),
  });

  it("identifiers: 128 characters of [A-Za-z0-9._:-] pass validation, 129 or a leading \"-\" are INVALID_ARGUMENT naming the field", async () => {
    const ok = `.${"a".repeat(maxIdentifierChars - 1)}`;
    const before = await state();
    // Well-formed but not configured: past validation, NOT_FOUND.
    expect(await refusal(t.admin.loadModel({ model: ok }))).toMatchObject({ code: Code.NotFound });
    for (const bad of ["a".repeat(maxIdentifierChars + 1), "-m", "", "a/b", "m\u0000", "\u202Em"]) {
      expect(await refusal(t.admin.loadModel({ model: bad })), JSON.stringify(bad)).toMatchObject({ code: Code.InvalidArgument, field: "model" });
      expect(await refusal(t.inference.predict({ model: bad })), JSON.stringify(bad)).toMatchObject({ code: Code.InvalidArgument, field: "model" });
      expect(await refusal(node.register({ nodeId: bad, address: "127.0.0.1:1", bootEpoch })), JSON.stringify(bad)).toMatchObject({ code: Code.InvalidArgument, field: "node_id" });
      expect(await refusal(t.admin.drainNode({ nodeId: bad })), JSON.stringify(bad)).toMatchObject({ code: Code.InvalidArgument, field: "node_id" });
    }
    expect(await refusal(node.register({ nodeId: "n-label", address: "127.0.0.1:1", bootEpoch, labels: { "-k": "v" } }))).toMatchObject({ code: Code.InvalidArgument, field: "labels" });
    expect(await state()).toEqual(before);
  });

  it("maxNodes: the last node that fits registers, the next is RESOURCE_EXHAUSTED naming node_id, nothing changes", async () => {
    // local + 2 = the cap of 3.
    await node.register({ nodeId: "n1", address: "127.0.0.1:1", bootEpoch });
    await node.register({ nodeId: `n2-${"x".repeat(maxIdentifierChars - 3)}`, address: "127.0.0.1:1", bootEpoch });
    const before = await state();
    expect(before.nodes).toHaveLength(3);
    expect(await refusal(node.register({ nodeId: "n3", address: "127.0.0.1:1", bootEpoch }))).toMatchObject({ code: Code.ResourceExhausted, field: "node_id" });
    // A registered node may still re-register.
    await node.register({ nodeId: "n1", address: "127.0.0.1:1", bootEpoch });
    expect(await state()).toEqual(before);
  });

  it("maxInventoryPerHeartbeat and maxOrphansPerHeartbeat: at the cap accepted, one over RESOURCE_EXHAUSTED naming the list, nothing changes", async () => {
    // One model per entry: two replicas of one model on a node are above its max (1), and the
    // reconciler's scale-down would change the listing between the two reads.
    const entry = (i: number) => ({ incarnation: `01JZ00000000000000000000${String(i).padStart(2, "0")}`, model: i === 1 ? "m" : `m${String(i)}`, address: `127.0.0.1:${String(7000 + i)}`, state: BackendState.READY });
    const hb = (sequence: bigint, more: Pick<MessageInitShape<typeof HeartbeatRequestSchema>, "backends" | "orphans">) => node.heartbeat({ nodeId: "n1", bootEpoch, sequence, ...more });
    expect(await hb(1n, { backends: [entry(1), entry(2)], orphans: [{ pid: 4001 }, { pid: 4002 }] })).toMatchObject({ registerRequired: false });
    const before = await state();
    expect(before.models.filter((m) => m.node === "n1" && m.model !== "").map((m) => m.model).sort()).toEqual(["m", "m2"]);
    expect(await refusal(hb(2n, { backends: [entry(1), entry(2), entry(3)] }))).toMatchObject({ code: Code.ResourceExhausted, field: "backends" });
    expect(await refusal(hb(3n, { backends: [entry(1), entry(2)], orphans: [{ pid: 4001 }, { pid: 4002 }, { pid: 4003 }] }))).toMatchObject({ code: Code.ResourceExhausted, field: "orphans" });
    expect(await state()).toEqual(before);
  });

  it("maxWatchersPerCaller and maxWatchers: the last stream that fits opens, the next is RESOURCE_EXHAUSTED naming the cap", async () => {
    const admin = createClient(AdminService, t.c.address);
    const ctl = new AbortController();
    const open = (): AsyncIterator<unknown> => admin.watchEvents({}, { signal: ctl.signal })[Symbol.asyncIterator]();
    const firstEvent = (it: AsyncIterator<unknown>) => it.next();
    try {
      // The harness's own in-process watcher is 1 of the 4.
      const mine = [open(), open()];
      const pending = mine.map(firstEvent);
      await expect.poll(() => t.c.hub.watching, { timeout: 10_000 }).toBe(3);
      expect(await refusal(firstEvent(open()))).toMatchObject({ code: Code.ResourceExhausted, field: "watchers_per_caller" });
      // Another caller still gets the last slot; past it the total cap answers.
      const other = new AbortController();
      const otherWatch = t.c.hub.watch({}, other.signal, undefined, "10.0.0.9")[Symbol.asyncIterator]();
      const otherFirst = otherWatch.next();
      await expect.poll(() => t.c.hub.watching, { timeout: 10_000 }).toBe(4);
      const third = t.c.hub.watch({}, other.signal, undefined, "10.0.0.10")[Symbol.asyncIterator]();
      expect(await refusal(third.next())).toMatchObject({ code: Code.ResourceExhausted, field: "watchers" });
      other.abort();
      ctl.abort();
      await Promise.allSettled([...pending, otherFirst]);
      await expect.poll(() => t.c.hub.watching, { timeout: 10_000 }).toBe(1);
    } finally {
      ctl.abort();
      admin.close();
    }
  });

  it("limits: out-of-range values and unknown keys are config errors naming the field", async () => {
    const { parseCoordinatorLimits, coordinatorLimitBounds } = await import("@warden/coordinator");
    for (const [key, b] of Object.entries(coordinatorLimitBounds)) {
      expect(() => parseCoordinatorLimits({ [key]: b.max })).not.toThrow();
      expect(() => parseCoordinatorLimits({ [key]: b.min })).not.toThrow();
      expect(() => parseCoordinatorLimits({ [key]: b.max + 1 })).toThrow(`limits.${key}`);
      expect(() => parseCoordinatorLimits({ [key]: b.min - 1 })).toThrow(`limits.${key}`);
    }
    expect(parseCoordinatorLimits({ maxMessageSize: "50MiB" }).maxMessageBytes).toBe(50 * 1024 * 1024);
    expect(() => parseCoordinatorLimits({ maxMesageSize: 1 })).toThrow("limits.maxMesageSize");
  });
});
