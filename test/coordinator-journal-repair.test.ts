/**
 * The coordinator restarted over a damaged journal: a torn tail (the last
 * record cut or corrupted) is cut off and said so — warn log with bytes and
 * records, `journal.repaired` on the stream, metric — while damage before the
 * tail refuses to start with DATA_LOSS.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { EvictionReason, EvictionStartedSchema, EvictionStoppedSchema, type Event } from "@warden/proto";
import { Code, isWardenError } from "@warden/common";
import { eventTypeOf } from "@warden/events";
import { resolveCoordinatorConfig, startCoordinator, type Coordinator } from "@warden/coordinator";
import { startNatsServer, type NatsServerHandle } from "./support/nats-server.js";
import { recordingLogger, type RecordingLogger } from "./support/recording-logger.js";
import { storedEvents } from "./support/audit-stream-reader.js";
import { until } from "./support/coordinator-harness.js";

let nats: NatsServerHandle;
beforeAll(async () => {
  nats = await startNatsServer();
});
afterAll(async () => {
  await nats.dispose();
});

// Nothing listens on port 1: the first run keeps its events unpublished, so
// the journal ends with the eviction.stopped record itself, not a published mark.
const unreachableNats = { url: "nats://127.0.0.1:1" };

async function start(dir: string, natsConfig: Record<string, string>, log: RecordingLogger = recordingLogger()): Promise<Coordinator> {
  return startCoordinator(resolveCoordinatorConfig({ listen: "127.0.0.1:0", stateDir: dir, embeddedAgent: false, models: [], nats: natsConfig, metricsListen: "127.0.0.1:0" }), { logger: log });
}

/** A first run that journals an eviction, started then stopped; returns the journal path and record ends. */
async function journalWithEviction(incarnation: string): Promise<{ dir: string; path: string; recordStarts: number[]; stopped: Event }> {
  const dir = await mkdtemp(join(tmpdir(), "warden-repair-"));
  const c = await start(dir, unreachableNats);
  const base = { nodeId: "n1", model: "m1", address: "127.0.0.1:9", incarnation };
  await c.hub.publish({ ...base, payload: { case: "evictionStarted", value: create(EvictionStartedSchema, { reason: EvictionReason.IDLE, trigger: "idle 15m" }) } });
  const stopped = await c.hub.publish({ ...base, payload: { case: "evictionStopped", value: create(EvictionStoppedSchema, { reason: EvictionReason.IDLE }) } });
  await c.close({ stopBackends: true });
  if (stopped === undefined) throw new Error("not journaled");
  const path = join(dir, "coordinator.journal");
  const image = await readFile(path);
  const recordStarts: number[] = [];
  for (let at = 8; at < image.length; at += 9 + image.readUInt32LE(at)) recordStarts.push(at);
  return { dir, path, recordStarts, stopped };
}

async function metricsText(c: Coordinator): Promise<string> {
  const res = await fetch(`http://${c.metricsAddress ?? ""}/metrics`);
  return res.text();
}

async function expectRepairReported(dir: string, path: string, droppedBytes: number, incarnation: string): Promise<void> {
  const log = recordingLogger();
  const c = await start(dir, { url: nats.url }, log);
  try {
    const warned = log.matching("warn", /journal torn tail repaired/);
    expect(warned).toHaveLength(1);
    expect(warned[0]?.msg).toContain(`${String(droppedBytes)} bytes (1 records)`);
    expect(warned[0]?.meta).toMatchObject({ path, droppedBytes, droppedRecords: 1 });

    const metrics = await metricsText(c);
    expect(metrics).toMatch(/^warden_journal_repairs_total 1$/m);
    expect(metrics).toMatch(new RegExp(`^warden_journal_repaired_bytes_total ${String(droppedBytes)}$`, "m"));
    expect(metrics).toMatch(/^warden_journal_repaired_records_total 1$/m);

    await until("outbox drained", () => c.outbox.stats().depth === 0);
    const stored = (await storedEvents(nats.url)) ?? [];
    const repaired = stored.find((e) => e.payload.case === "journalRepaired" && e.payload.value.path === path);
    expect(repaired?.payload.case === "journalRepaired" && repaired.payload.value).toMatchObject({ path, droppedBytes: BigInt(droppedBytes), droppedRecords: 1 });
    // The instance's stop was lost with the tail, so it is recovered from its last journaled event:
    // an eviction never settled, so its outcome is unknown → a leftover (reaped once an agent says it is gone).
    const mine = stored.filter((e) => e.incarnation === incarnation).map((e) => eventTypeOf(e));
    expect(mine.slice(0, 4)).toEqual(["eviction.started", "recovered", "eviction.failed", "instance.adopted"]);
    expect(mine.slice(4).filter((t) => t !== "eviction.retried" && t !== "leftover.reaped")).toEqual([]);
  } finally {
    await c.close({ stopBackends: true });
  }
}

describe("coordinator over a damaged journal", () => {
  it("cut inside the last record (an fsync'd eviction.stopped): starts, and reports the repair", async () => {
    const { dir, path, recordStarts } = await journalWithEviction("cut-1");
    try {
      const image = await readFile(path);
      const lastAt = recordStarts.at(-1) ?? 0;
      await writeFile(path, image.subarray(0, image.length - 5));
      await expectRepairReported(dir, path, image.length - 5 - lastAt, "cut-1");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("the last record's bytes corrupted (CRC fails, nothing after it): starts, and reports the repair", async () => {
    const { dir, path, recordStarts } = await journalWithEviction("crc-1");
    try {
      const image = await readFile(path);
      const lastAt = recordStarts.at(-1) ?? 0;
      image[lastAt + 20] = (image[lastAt + 20] ?? 0) ^ 0x40;
      await writeFile(path, image);
      await expectRepairReported(dir, path, image.length - lastAt, "crc-1");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("a corrupt record in the middle refuses to start with DATA_LOSS naming the file, and leaves it as it was", async () => {
    const { dir, path, recordStarts } = await journalWithEviction("mid-1");
    try {
      const image = await readFile(path);
      const middle = recordStarts.at(-2) ?? 0; // the eviction.started record; eviction.stopped follows it intact
      image[middle + 20] = (image[middle + 20] ?? 0) ^ 0x40;
      await writeFile(path, image);
      const err: unknown = await start(dir, { url: nats.url }).then(
        async (c) => {
          await c.close({ stopBackends: true });
          return undefined;
        },
        (e: unknown) => e,
      );
      expect(isWardenError(err, Code.DataLoss)).toBe(true);
      expect(String(err)).toContain(path);
      expect(String(err)).toContain(`offset ${String(middle)}`);
      expect(await readFile(path)).toEqual(image);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
