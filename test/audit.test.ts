/**
 * Audit pipeline against a real nats-server (one per file, random loopback
 * port): file journal → outbox → JetStream publisher → durable subscriber.
 * Waits for conditions with generous deadlines; never asserts on elapsed time.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { spawn } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import {
  EvictionFailedOutcome,
  EvictionFailedSchema,
  EvictionReason,
  EvictionStartedSchema,
  EvictionStoppedSchema,
  BackendLoadedSchema,
  type Event,
} from "@warden/proto";
import { createUlidFactory, cryptoRng, systemClock } from "@warden/common";
import { encodeEvent, subjectForEvent, type EventInit } from "@warden/events";
import { createOutbox, type Outbox, type Publisher } from "@warden/outbox";
import { openFileJournal, type FileJournal } from "@warden/journal";
import {
  connectAudit,
  createNatsPublisher,
  defaultAuditStreamName,
  ensureAuditStream,
  subscribeAuditEvents,
  type AuditDelivery,
  type AuditSubscribeOptions,
} from "@warden/audit";
import { freePort } from "./support/free-port.js";
import { startNatsServer, type NatsServerHandle } from "./support/nats-server.js";

let server: NatsServerHandle;
let dir: string;
const connections: NatsConnection[] = [];
const closers: (() => Promise<void>)[] = [];

beforeAll(async () => {
  server = await startNatsServer();
});
afterAll(async () => {
  await server.dispose();
});
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-audit-"));
  if (!server.running()) await server.start();
  const nc = await connect();
  const jsm = await jetstreamManager(nc);
  await jsm.streams.delete(defaultAuditStreamName).catch(() => false);
  expect(await ensureAuditStream(nc)).toEqual({ action: "created", name: defaultAuditStreamName });
});
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c().catch(() => undefined);
  for (const nc of connections.splice(0)) await nc.close().catch(() => undefined);
  await rm(dir, { recursive: true, force: true });
});

async function connect(): Promise<NatsConnection> {
  const nc = await connectAudit({ servers: server.url, reconnectTimeWaitMs: 100, name: "audit-test" });
  connections.push(nc);
  return nc;
}

async function waitFor(what: string, cond: () => boolean, deadlineMs = 45_000): Promise<void> {
  const until = Date.now() + deadlineMs;
  while (!cond()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

interface Coordinator {
  outbox: Outbox;
  journal: FileJournal;
  recovery: Awaited<ReturnType<Outbox["start"]>>;
}

async function startCoordinator(publisher: Publisher, capacity?: number, file = "journal.wj"): Promise<Coordinator> {
  const journal = await openFileJournal({ path: join(dir, file) });
  const outbox = createOutbox({
    journal,
    publisher,
    clock: systemClock,
    rng: cryptoRng,
    newId: createUlidFactory(systemClock, cryptoRng),
    ...(capacity === undefined ? {} : { capacity }),
    retryBackoff: { initialMs: 50, factor: 2, maxMs: 500, jitter: 0.2 },
  });
  const recovery = await outbox.start();
  closers.push(async () => {
    await outbox.close();
    await journal.close();
  });
  return { outbox, journal, recovery };
}

/** Reads in the background until stopped; `seen` grows as events arrive. */
function reader(nc: NatsConnection, options: Omit<AuditSubscribeOptions, "signal">) {
  const ctl = new AbortController();
  const seen: AuditDelivery[] = [];
  const done = (async () => {
    for await (const d of subscribeAuditEvents(nc, { ...options, signal: ctl.signal })) seen.push(d);
  })();
  const stop = async () => {
    ctl.abort();
    await done;
  };
  closers.push(stop);
  return { seen, stop, done };
}

const ids = (ds: readonly AuditDelivery[]) => ds.map((d) => d.event.id);
const unique = (xs: readonly string[]) => new Set(xs).size === xs.length;

const started = (incarnation: string, nodeId = "node-1", model = "llama-8b"): EventInit => ({
  nodeId,
  model,
  incarnation,
  address: "127.0.0.1:40001",
  payload: { case: "evictionStarted", value: create(EvictionStartedSchema, { reason: EvictionReason.LRU, trigger: "load of qwen" }) },
});
const stopped = (incarnation: string, nodeId = "node-1", model = "llama-8b"): EventInit => ({
  nodeId,
  model,
  incarnation,
  address: "127.0.0.1:40001",
  payload: { case: "evictionStopped", value: create(EvictionStoppedSchema, { reason: EvictionReason.LRU }) },
});
const failed = (incarnation: string, outcome: EvictionFailedOutcome): EventInit => ({
  nodeId: "node-1",
  model: "llama-8b",
  incarnation,
  payload: { case: "evictionFailed", value: create(EvictionFailedSchema, { reason: EvictionReason.ADMIN, outcome, error: "deadline exceeded" }) },
});
const loaded = (incarnation: string, nodeId: string, model: string): EventInit => ({
  nodeId,
  model,
  incarnation,
  payload: { case: "backendLoaded", value: create(BackendLoadedSchema, { loadDurationMs: 1n }) },
});

/** Per incarnation, the sequence numbers in delivery order must be increasing. */
function expectPerInstanceOrder(ds: readonly AuditDelivery[]): void {
  const last = new Map<string, bigint>();
  for (const d of ds) {
    const n = d.event.sequence?.n ?? 0n;
    const prev = last.get(d.event.incarnation) ?? 0n;
    expect(n, `instance ${d.event.incarnation}`).toBeGreaterThan(prev);
    last.set(d.event.incarnation, n);
  }
}

describe("audit pipeline on a real nats-server", () => {
  it("connects through a comma-separated server list whichever of its servers is down, first or last", async () => {
    const dead = `nats://127.0.0.1:${String(await freePort())}`;
    for (const servers of [`${dead},${server.url}`, `${server.url},${dead}`]) {
      const nc = await connectAudit({ servers, name: "audit-test-list" });
      connections.push(nc);
      expect(nc.getServer()).toBe(server.url.replace("nats://", ""));
    }
  });

  it("publishes an eviction as started then stopped, and a failed stop as started then failed, with ids and sequences", async () => {
    const nc = await connect();
    const c = await startCoordinator(createNatsPublisher(nc));
    const a1 = await c.outbox.emit(started("INC-A"));
    const a2 = await c.outbox.emit(stopped("INC-A"));
    const b1 = await c.outbox.emit(started("INC-B"));
    const b2 = await c.outbox.emit(failed("INC-B", EvictionFailedOutcome.REGISTERED_AGAIN));
    const l1 = await c.outbox.emit(started("INC-C"));
    const l2 = await c.outbox.emit(failed("INC-C", EvictionFailedOutcome.LEFTOVER));
    const r = reader(await connect(), { durable: "t1" });
    await waitFor("6 events", () => r.seen.length >= 6);
    await r.stop();
    expect(ids(r.seen)).toEqual([a1, a2, b1, b2, l1, l2].map((x) => x.event.id));
    expect(r.seen.map((d) => d.type)).toEqual(["eviction.started", "eviction.stopped", "eviction.started", "eviction.failed", "eviction.started", "eviction.failed"]);
    expect(r.seen.map((d) => [d.event.incarnation, d.event.sequence?.n, d.event.sequence?.epoch])).toEqual([
      ["INC-A", 1n, c.recovery.epoch],
      ["INC-A", 2n, c.recovery.epoch],
      ["INC-B", 1n, c.recovery.epoch],
      ["INC-B", 2n, c.recovery.epoch],
      ["INC-C", 1n, c.recovery.epoch],
      ["INC-C", 2n, c.recovery.epoch],
    ]);
    const outcomes = r.seen.flatMap((d) => (d.event.payload.case === "evictionFailed" ? [d.event.payload.value.outcome] : []));
    expect(outcomes).toEqual([EvictionFailedOutcome.REGISTERED_AGAIN, EvictionFailedOutcome.LEFTOVER]);
    expect(r.seen[0]?.subject).toBe("warden.events.eviction.started.node-1.llama-8b");
    await waitFor("outbox empty", () => c.outbox.stats().depth === 0);
  });

  it("delivers every event exactly once with many acks in flight, in per-instance order", async () => {
    const nc = await connect();
    const c = await startCoordinator(createNatsPublisher(nc));
    const sent: Event[] = [];
    await Promise.all(
      Array.from({ length: 50 }, async (_, i) => {
        for (let k = 0; k < 10; k++) sent.push((await c.outbox.emit(k % 2 === 0 ? started(`I${i}`) : stopped(`I${i}`))).event);
      }),
    );
    const r = reader(await connect(), { durable: "t2" });
    await waitFor("500 events", () => r.seen.length >= 500);
    await waitFor("outbox empty", () => c.outbox.stats().depth === 0);
    await r.stop();
    expect(r.seen).toHaveLength(500);
    expect(new Set(ids(r.seen))).toEqual(new Set(sent.map((e) => e.id)));
    expectPerInstanceOrder(r.seen);
  });

  it("loses nothing and shows no duplicate through a NATS outage (server killed, evictions go on, server started again)", async () => {
    const pubConn = await connect();
    const c = await startCoordinator(createNatsPublisher(pubConn, { ackTimeoutMs: 1_000 }));
    const small = await startCoordinator(createNatsPublisher(pubConn, { ackTimeoutMs: 1_000 }), 10, "small.wj");
    const sent: Event[] = [];
    for (let i = 0; i < 20; i++) sent.push((await c.outbox.emit(started(`O${i}`))).event);
    const r = reader(await connect(), { durable: "t3", filter: { nodeId: "node-1" } });
    await waitFor("first events", () => r.seen.length >= 20);

    await server.kill();
    // Evictions go on while NATS is down: every append still resolves (journaled).
    for (let round = 0; round < 10; round++) {
      for (let i = 0; i < 20; i++) sent.push((await c.outbox.emit(i % 2 === 0 ? stopped(`O${i}`) : started(`O${i}`))).event);
      await new Promise((res) => setTimeout(res, 100));
    }
    await waitFor("publish failures seen", () => c.outbox.stats().retries > 0);
    expect(c.outbox.stats().depth).toBeGreaterThan(0);
    expect(c.outbox.health()).toEqual({ status: "serving" });
    // A small outbox overflows during the outage: counted and reported, never silent.
    const outcomes = [];
    for (let i = 0; i < 15; i++) outcomes.push((await small.outbox.emit(started(`S${i}`, "node-small"))).outcome);
    expect(outcomes.filter((o) => o === "dropped").length).toBeGreaterThanOrEqual(5);
    expect(small.outbox.stats().dropped).toBeGreaterThanOrEqual(5);
    expect(small.outbox.health().status).toBe("not-serving");

    await server.start();
    await waitFor("outbox drained", () => c.outbox.stats().depth === 0, 60_000);
    await waitFor("all events read", () => r.seen.length >= sent.length, 60_000);
    await waitFor("small outbox drained and healthy", () => small.outbox.health().status === "serving", 60_000);
    await new Promise((res) => setTimeout(res, 300)); // room for a stray duplicate to show up
    await r.stop();
    expect(r.seen).toHaveLength(sent.length);
    expect(unique(ids(r.seen))).toBe(true);
    expect(new Set(ids(r.seen))).toEqual(new Set(sent.map((e) => e.id)));
    expectPerInstanceOrder(r.seen);
  });

  it("throws nothing when the server is SIGKILLed in a burst of publishes and a publisher is closed as it dies; the outbox drains after", async () => {
    // The process "stays up" = nothing reaches uncaughtException (vitest would also fail the run).
    const uncaught: unknown[] = [];
    const record = (err: unknown): void => {
      uncaught.push(err);
    };
    process.on("uncaughtException", record);
    try {
      const c = await startCoordinator(createNatsPublisher(await connect(), { ackTimeoutMs: 1_000 }));
      // A second one, closed the moment the server is gone: a coordinator shutting down as NATS dies.
      const doomedConn = await connect();
      const doomedPublisher = createNatsPublisher(doomedConn, { ackTimeoutMs: 600_000 });
      const doomed = await startCoordinator(doomedPublisher, undefined, "doomed.wj");
      const r = reader(await connect(), { durable: "t-kill", filter: { nodeId: "node-1" } });
      const sent: Event[] = [];
      let killing: Promise<void> | undefined;
      for (let i = 0; i < 400; i++) {
        // Each emit starts a publish; the ones after the SIGKILL go into a socket whose peer is dead.
        const [e] = await Promise.all([c.outbox.emit(started(`B${i}`)), doomed.outbox.emit(started(`D${i}`, "node-doomed"))]);
        sent.push(e.event);
        if (i === 200) killing = server.kill();
      }
      await killing;
      doomedPublisher.close();
      await doomedConn.close();
      expect(c.outbox.stats().depth).toBeGreaterThan(0);

      await server.start();
      await waitFor("outbox drained", () => c.outbox.stats().depth === 0, 60_000);
      await waitFor("all events read", () => r.seen.length >= sent.length, 60_000);
      await r.stop();
      expect(new Set(ids(r.seen))).toEqual(new Set(sent.map((e) => e.id)));
      expect(uncaught).toEqual([]);
    } finally {
      process.off("uncaughtException", record);
    }
  });

  it("after a crash replays the journal: nothing lost, duplicates removed, recovered where a stop was in flight", async () => {
    const nc = await connect();
    const real = createNatsPublisher(nc);
    // Stores events in the stream but "crashes" before the acks are seen, so
    // they are not marked published: the restart sends them again.
    let ackLost = false;
    const flaky: Publisher = {
      async publish(event, signal) {
        const ack = await real.publish(event, signal);
        if (ackLost) return new Promise(() => undefined);
        return ack;
      },
    };
    const first = await startCoordinator(flaky);
    const sent: Event[] = [];
    sent.push((await first.outbox.emit(started("DONE"))).event);
    sent.push((await first.outbox.emit(stopped("DONE"))).event);
    await waitFor("published", () => first.outbox.stats().depth === 0);
    ackLost = true;
    sent.push((await first.outbox.emit(started("INFLIGHT-1"))).event);
    sent.push((await first.outbox.emit(started("INFLIGHT-2"))).event);
    sent.push((await first.outbox.emit(loaded("LOADED", "node-1", "m"))).event);
    await waitFor("stored in the stream", () => first.outbox.stats().inFlight === 3);
    await first.outbox.recordStopIntent({ incarnation: "INFLIGHT-1", nodeId: "node-1", model: "llama-8b", address: "127.0.0.1:40001", reason: "lru" });
    // Crash: the outbox is dropped without flushing; its journal file is what survives.
    await first.journal.close();

    const second = await startCoordinator(createNatsPublisher(nc));
    expect(second.recovery.epoch).toBeGreaterThan(first.recovery.epoch);
    expect(second.recovery.requeued).toBe(3);
    expect(second.recovery.openStopIntents.map((i) => i.incarnation)).toEqual(["INFLIGHT-1"]);
    expect(second.recovery.recovered.map((e) => e.incarnation).sort()).toEqual(["INFLIGHT-1", "INFLIGHT-2", "LOADED"]);
    await waitFor("replayed and published", () => second.outbox.stats().depth === 0);
    expect(second.outbox.stats().duplicates).toBe(3); // Nats-Msg-Id de-duplicated the re-sends

    const r = reader(await connect(), { durable: "t4" });
    const want = [...sent, ...second.recovery.recovered].map((e) => e.id);
    await waitFor("all events", () => r.seen.length >= want.length);
    await new Promise((res) => setTimeout(res, 300));
    await r.stop();
    expect(ids(r.seen).sort()).toEqual([...want].sort());
    const recovered = r.seen.filter((d) => d.type === "recovered");
    expect(recovered.map((d) => [d.event.incarnation, d.event.payload.case === "recovered" ? d.event.payload.value.lastEventType : ""]).sort()).toEqual([
      ["INFLIGHT-1", "eviction.started"],
      ["INFLIGHT-2", "eviction.started"],
      ["LOADED", "backend.loaded"],
    ]);
  });

  it("de-duplicates copies stored beyond the duplicate window and across redelivery", async () => {
    const nc = await connect();
    const c = await startCoordinator(createNatsPublisher(nc));
    const { event } = await c.outbox.emit(started("DUP"));
    await waitFor("published", () => c.outbox.stats().depth === 0);
    // The same event stored again under another msg id, as after an outage longer than the window.
    const js = jetstream(nc);
    await js.publish(subjectForEvent(event), encodeEvent(event), { msgID: `${event.id}-late` });
    const second = (await c.outbox.emit(stopped("DUP"))).event;
    const r = reader(await connect(), { durable: "t5" });
    await waitFor("second event", () => r.seen.some((d) => d.event.id === second.id));
    await r.stop();
    expect(ids(r.seen)).toEqual([event.id, second.id]);
  });

  it("filters by type, node and model (one server-side subject, the rest client-side), escaping hostile ids", async () => {
    const nc = await connect();
    const c = await startCoordinator(createNatsPublisher(nc));
    const all: Event[] = [];
    for (const node of ["gpu.1", "gpu_2", "*"]) {
      for (const model of ["llama.8b", "qwen>7b"]) {
        all.push((await c.outbox.emit(started(`${node}/${model}`, node, model))).event);
        all.push((await c.outbox.emit(loaded(`${node}/${model}`, node, model))).event);
      }
    }
    const byType = reader(await connect(), { durable: "f1", filter: { types: ["backend.loaded"], nodeId: "*" } });
    const byModel = reader(await connect(), { durable: "f2", filter: { model: "qwen>7b" } });
    const byNode = reader(await connect(), { durable: "f3", filter: { nodeId: "gpu.1", types: ["eviction.started", "eviction.stopped"] } });
    await waitFor("filtered reads", () => byType.seen.length >= 2 && byModel.seen.length >= 6 && byNode.seen.length >= 2);
    const marker = (await c.outbox.emit(started("marker", "*", "qwen>7b"))).event;
    all.push(marker);
    await waitFor("marker", () => byModel.seen.some((d) => d.event.id === marker.id));
    await Promise.all([byType.stop(), byModel.stop(), byNode.stop()]);
    expect(byType.seen.map((d) => [d.type, d.event.nodeId, d.event.model])).toEqual([
      ["backend.loaded", "*", "llama.8b"],
      ["backend.loaded", "*", "qwen>7b"],
    ]);
    expect(byModel.seen.every((d) => d.event.model === "qwen>7b")).toBe(true);
    expect(byModel.seen).toHaveLength(7);
    expect(byNode.seen.map((d) => [d.type, d.event.nodeId])).toEqual([
      ["eviction.started", "gpu.1"],
      ["eviction.started", "gpu.1"],
    ]);
    expect(byType.seen[0]?.subject).toBe("warden.events.backend.loaded._2A.llama_2E8b");
  });

  it("starts from a stream sequence or a time, and a restarted durable resumes without gaps", async () => {
    const nc = await connect();
    const c = await startCoordinator(createNatsPublisher(nc));
    const firstBatch: Event[] = [];
    for (let i = 0; i < 10; i++) firstBatch.push((await c.outbox.emit(started(`Q${i}`))).event);
    await waitFor("published", () => c.outbox.stats().depth === 0);
    await new Promise((res) => setTimeout(res, 50));
    const between = new Date();
    await new Promise((res) => setTimeout(res, 50));
    const secondBatch: Event[] = [];
    for (let i = 0; i < 5; i++) secondBatch.push((await c.outbox.emit(stopped(`Q${i}`))).event);
    await waitFor("published", () => c.outbox.stats().depth === 0);

    const fromSeq = reader(await connect(), { durable: "s1", start: { kind: "sequence", streamSequence: 6 } });
    const fromTime = reader(await connect(), { durable: "s2", start: { kind: "time", at: between } });
    await waitFor("reads", () => fromSeq.seen.length >= 10 && fromTime.seen.length >= 5);
    await Promise.all([fromSeq.stop(), fromTime.stop()]);
    expect(fromSeq.seen.map((d) => d.streamSequence)).toEqual([6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
    expect(ids(fromTime.seen)).toEqual(ids(fromTime.seen).filter((id) => secondBatch.some((e) => e.id === id)));
    expect(ids(fromTime.seen)).toEqual(secondBatch.map((e) => e.id));

    // Resume: read 7, stop, start again with the same durable and the ids already handled.
    // Messages the first reader had buffered are handed back (nak) or, if they
    // were still on the wire, redelivered after ack_wait: in any order, so the
    // check is "no gap, no duplicate", and per-instance order comes from (epoch, n).
    const handled: string[] = [];
    const sub = await connect();
    for await (const d of subscribeAuditEvents(sub, { durable: "resume", ackWaitMs: 2_000 })) {
      handled.push(d.event.id);
      if (handled.length === 7) break; // the 7th is handled but its ack is not sent
    }
    const rest = reader(await connect(), { durable: "resume", seenEventIds: handled });
    await waitFor("rest", () => rest.seen.length >= 8);
    await new Promise((res) => setTimeout(res, 200));
    await rest.stop();
    const got = [...handled, ...ids(rest.seen)];
    expect(unique(got)).toBe(true);
    expect(got.sort()).toEqual([...firstBatch, ...secondBatch].map((e) => e.id).sort());
  });
});

describe("coordinator process killed with events in the outbox", () => {
  // A child process stands in for the coordinator: journal + outbox + NATS
  // publisher, emitting evictions until SIGKILL. It prints each event id once
  // its append resolved (journaled), so every printed id must reach readers.
  const root = join(import.meta.dirname, "..");
  const child = (mode: "emit" | "recover") => `
import { create } from "${import.meta.resolve("@bufbuild/protobuf")}";
import { EvictionStartedSchema, EvictionStoppedSchema } from "${root}/packages/proto/src/index.ts";
import { createUlidFactory, cryptoRng, systemClock } from "${root}/packages/common/src/index.ts";
import { createOutbox } from "${root}/packages/outbox/src/index.ts";
import { openFileJournal } from "${root}/packages/journal/src/index.ts";
import { connectAudit, createNatsPublisher } from "${root}/packages/audit/src/index.ts";
const [url, path] = process.argv.slice(2);
const nc = await connectAudit({ servers: url, reconnectTimeWaitMs: 100 });
const journal = await openFileJournal({ path });
const outbox = createOutbox({ journal, publisher: createNatsPublisher(nc, { ackTimeoutMs: 1000 }), clock: systemClock, rng: cryptoRng,
  newId: createUlidFactory(systemClock, cryptoRng), maxInFlight: 64 });
const rec = await outbox.start();
const out = (o) => process.stdout.write(JSON.stringify(o) + "\\n");
out({ requeued: rec.requeued, recovered: rec.recovered.map((e) => [e.id, e.incarnation]) });
if (${JSON.stringify(mode)} === "emit") {
  for (let i = 0; ; i++) {
    const base = { nodeId: "crash-node", model: "m" + (i % 4), incarnation: "K" + i, address: "127.0.0.1:1" };
    out({ id: (await outbox.emit({ ...base, payload: { case: "evictionStarted", value: create(EvictionStartedSchema, {}) } })).event.id });
    if (i % 2 === 0) out({ id: (await outbox.emit({ ...base, payload: { case: "evictionStopped", value: create(EvictionStoppedSchema, {}) } })).event.id });
    if (i % 20 === 0) await new Promise((r) => setTimeout(r, 5));
  }
} else {
  await outbox.drain(AbortSignal.timeout(60000));
  await journal.close();
  await nc.close();
  out({ drained: true });
}
`;
  const runChild = async (mode: "emit" | "recover", journalPath: string) => {
    const script = join(dir, `coordinator-${mode}.mts`);
    await writeFile(script, child(mode));
    const proc = spawn(process.execPath, ["--import", "tsx", script, server.url, journalPath], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
    const lines: Record<string, unknown>[] = [];
    let buf = "";
    let stderr = "";
    proc.stdout.on("data", (d: Buffer) => {
      buf += d.toString();
      const parts = buf.split("\n");
      buf = parts.pop() ?? "";
      for (const p of parts) if (p !== "") lines.push(JSON.parse(p) as Record<string, unknown>);
    });
    proc.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => proc.once("exit", (code) => { resolve(code); }));
    closers.push(async () => {
      proc.kill("SIGKILL");
      await exited;
    });
    return { proc, lines, exited, stderr: () => stderr };
  };

  it("replays on restart: none lost, none duplicated after de-dup, recovered where a stop was in flight", async () => {
    const journalPath = join(dir, "coordinator.wj");
    const first = await runChild("emit", journalPath);
    const until = Date.now() + 30_000;
    while (first.lines.filter((l) => "id" in l).length < 400) {
      if (Date.now() > until) throw new Error(`child did not emit: ${first.stderr()}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    first.proc.kill("SIGKILL");
    await first.exited;
    const printed = first.lines.flatMap((l) => (typeof l["id"] === "string" ? [l["id"]] : []));

    const second = await runChild("recover", journalPath);
    expect(await second.exited, second.stderr()).toBe(0);
    const head = second.lines[0] as { requeued: number; recovered: [string, string][] };
    expect(second.lines.at(-1)).toEqual({ drained: true });

    const r = reader(await connect(), { durable: "crash", filter: { nodeId: "crash-node" } });
    const want = new Set([...printed, ...head.recovered.map(([id]) => id)]);
    await waitFor("every journaled event", () => [...want].every((id) => r.seen.some((d) => d.event.id === id)));
    await new Promise((res) => setTimeout(res, 300));
    await r.stop();
    expect(unique(ids(r.seen))).toBe(true);
    // Per incarnation, in the stream: a started without a stopped must have earned a recovered.
    const byInc = new Map<string, string[]>();
    for (const d of r.seen) byInc.set(d.event.incarnation, [...(byInc.get(d.event.incarnation) ?? []), d.type]);
    for (const [inc, types] of byInc) {
      const inFlight = types.includes("eviction.started") && !types.includes("eviction.stopped");
      expect(types.includes("recovered"), `${inc}: ${types.join(",")}`).toBe(inFlight);
    }
    expect(head.recovered.length).toBeGreaterThan(0);
    expect(head.requeued).toBeGreaterThan(0); // the kill left unpublished events in the journal
  });
});

describe("example JSONL audit consumer", () => {
  const script = join(import.meta.dirname, "..", "packages", "audit", "src", "examples", "jsonl-audit-consumer.ts");
  const runConsumer = (out: string) => {
    const child = spawn(process.execPath, ["--import", "tsx", script, "--nats", server.url, "--out", out, "--durable", "jsonl"], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => { resolve(code); }));
    closers.push(async () => {
      child.kill("SIGKILL");
      await exited;
    });
    return { child, exited, stderr: () => stderr };
  };
  const lines = async (path: string): Promise<{ type: string; id: string }[]> => {
    const text = await readFile(path, "utf8").catch(() => "");
    return text.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l) as { type: string; id: string });
  };

  it("appends each event once as a JSON line, and resumes after a restart", async () => {
    const out = join(dir, "audit.jsonl");
    const nc = await connect();
    const c = await startCoordinator(createNatsPublisher(nc));
    const sent: Event[] = [];
    for (let i = 0; i < 5; i++) sent.push((await c.outbox.emit(started(`J${i}`))).event);
    const untilLines = async (consumer: ReturnType<typeof runConsumer>, n: number): Promise<void> => {
      const until = Date.now() + 60_000;
      while ((await lines(out)).length < n) {
        if (Date.now() > until) throw new Error(`timed out waiting for ${n} lines; consumer stderr: ${consumer.stderr()}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    const first = runConsumer(out);
    await untilLines(first, 5);
    first.child.kill("SIGTERM");
    expect(await first.exited).toBe(0);
    for (let i = 0; i < 3; i++) sent.push((await c.outbox.emit(stopped(`J${i}`))).event);
    const second = runConsumer(out);
    await untilLines(second, 8);
    await new Promise((r) => setTimeout(r, 300)); // room for a stray duplicate line
    second.child.kill("SIGTERM");
    expect(await second.exited).toBe(0);
    const got = await lines(out);
    expect(got.map((l) => l.id)).toEqual(sent.map((e) => e.id));
    expect(got[0]?.type).toBe("eviction.started");
    expect(got.at(-1)?.type).toBe("eviction.stopped");
  });
});

describe("credentials", () => {
  it("connects with user/password and with a token, and is refused without them", async () => {
    const withUser = await startNatsServer({ args: ["--user", "warden", "--pass", "s3cret"] });
    const withToken = await startNatsServer({ args: ["--auth", "t0ken"] });
    try {
      const a = await connectAudit({ servers: withUser.url, credentials: { kind: "user-password", user: "warden", password: "s3cret" } });
      await a.flush();
      await a.close();
      const b = await connectAudit({ servers: withToken.url, credentials: { kind: "token", token: "t0ken" } });
      await b.flush();
      await b.close();
      await expect(connectAudit({ servers: withUser.url, credentials: { kind: "user-password", user: "warden", password: "nope" } })).rejects.toThrow();
      await expect(connectAudit({ servers: withToken.url })).rejects.toThrow();
    } finally {
      await withUser.dispose();
      await withToken.dispose();
    }
  });
});

describe("least-privilege NATS permissions (README)", () => {
  // The permission sets documented in packages/audit/README.md, checked against
  // a real server: every subject the pipeline uses is allowed, the rest denied.
  const config = `
accounts {
  WARDEN {
    jetstream: enabled
    users: [
      { user: coordinator, password: cpass, permissions: {
          publish: { allow: ["warden.events.>", "$JS.API.INFO", "$JS.API.STREAM.INFO.WARDEN_EVENTS",
                             "$JS.API.STREAM.CREATE.WARDEN_EVENTS", "$JS.API.STREAM.UPDATE.WARDEN_EVENTS"] }
          subscribe: { allow: ["_INBOX_coordinator.>"] } } }
      { user: auditor, password: apass, permissions: {
          publish: { allow: ["$JS.API.INFO", "$JS.API.CONSUMER.INFO.WARDEN_EVENTS.auditor",
                             "$JS.API.CONSUMER.CREATE.WARDEN_EVENTS.auditor.>",
                             "$JS.API.CONSUMER.MSG.NEXT.WARDEN_EVENTS.auditor", "$JS.ACK.WARDEN_EVENTS.auditor.>"] }
          subscribe: { allow: ["_INBOX_auditor.>"] } } }
      { user: admin, password: xpass }
    ]
  }
}
`;

  it("lets the coordinator create the stream and publish, the auditor read its durable, and denies everything else", async () => {
    const confDir = await mkdtemp(join(tmpdir(), "warden-nats-conf-"));
    const confPath = join(confDir, "nats.conf");
    await writeFile(confPath, config);
    const secured = await startNatsServer({ args: ["-c", confPath] });
    const as = async (user: string, password: string, inboxPrefix?: string) => {
      const nc = await connectAudit({
        servers: secured.url,
        credentials: { kind: "user-password", user, password },
        ...(inboxPrefix === undefined ? {} : { inboxPrefix }),
        reconnectTimeWaitMs: 100,
      });
      connections.push(nc);
      return nc;
    };
    try {
      const coord = await as("coordinator", "cpass", "_INBOX_coordinator");
      expect(await ensureAuditStream(coord)).toMatchObject({ action: "created" });
      expect(await ensureAuditStream(coord, { maxBytes: 1 << 30 })).toMatchObject({ action: "updated" });
      const c = await startCoordinator(createNatsPublisher(coord), undefined, "secure.wj");
      const sent = [(await c.outbox.emit(started("P1"))).event, (await c.outbox.emit(stopped("P1"))).event];
      await waitFor("published with the coordinator's permissions", () => c.outbox.stats().published === 2);

      const auditor = await as("auditor", "apass", "_INBOX_auditor");
      const r = reader(auditor, { durable: "auditor" });
      await waitFor("auditor reads", () => r.seen.length >= 2);
      await r.stop();
      expect(ids(r.seen)).toEqual(sent.map((e) => e.id));

      // Denied: the auditor publishing events, creating another durable, deleting the stream.
      const auditorJs = jetstream(auditor, { timeout: 1_500 });
      await expect(auditorJs.publish("warden.events.eviction.started.n.m", new Uint8Array([1]))).rejects.toThrow();
      await expect(
        (async () => {
          for await (const _ of subscribeAuditEvents(auditor, { durable: "other", signal: AbortSignal.timeout(3_000) })) break;
        })(),
      ).rejects.toThrow();
      const auditorJsm = await jetstreamManager(auditor, { timeout: 1_500 });
      await expect(auditorJsm.streams.delete(defaultAuditStreamName)).rejects.toThrow();
      // Denied: the coordinator deleting the stream or reading events.
      const coordJsm = await jetstreamManager(coord, { timeout: 1_500 });
      await expect(coordJsm.streams.delete(defaultAuditStreamName)).rejects.toThrow();
      await expect(coordJsm.consumers.add(defaultAuditStreamName, { durable_name: "sneaky" })).rejects.toThrow();

      const admin = await as("admin", "xpass");
      const info = await (await jetstreamManager(admin)).streams.info(defaultAuditStreamName);
      expect(info.state.messages).toBe(2); // nothing denied got stored
      expect((await (await jetstreamManager(admin)).consumers.list(defaultAuditStreamName).next()).map((ci) => ci.name)).toEqual(["auditor"]);
    } finally {
      for (const cl of closers.splice(0).reverse()) await cl().catch(() => undefined);
      for (const nc of connections.splice(0)) await nc.close().catch(() => undefined);
      await secured.dispose();
      await rm(confDir, { recursive: true, force: true });
    }
  });
});

