/**
 * The leader fence over real processes: three nats-servers, two
 * `warden coordinator --ha`, one agent, a backend-sim. The leader is
 * SIGSTOPped past its lease (15 s; lease 3 s) while the model it last used
 * goes idle in its view (idle timeout 8 s), the standby takes over and keeps
 * the model busy, then the old leader is SIGCONTed. Whatever its stale view
 * decides on waking (an idle eviction, every node unreachable), nothing of it
 * may take effect. Ground truth: the audit stream read directly, the journal
 * stream read directly, the process table, and the backend itself.
 */
import { describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { connectAudit } from "@warden/audit";
import { eventTypeOf } from "@warden/events";
import { decodeJournalRecord } from "@warden/journal";
import type { JournalRecord } from "@warden/outbox";
import { InstanceState } from "@warden/proto";
import { storedEvents } from "./support/audit-stream-reader.js";
import { dedupById, runningBackends } from "./support/chaos-checks.js";
import { simModel, until } from "./support/coordinator-harness.js";
import type { HaCoordinator } from "./support/ha-cluster.js";
import { haClusterLifecycle } from "./support/ha-cluster-lifecycle.js";

const ha = haClusterLifecycle();

async function predictVia(coord: HaCoordinator, model: string): Promise<string> {
  const r = await coord.inference.predict({ model, options: { Prompt: "hi", Tokens: 2 } }, { timeoutMs: 20_000 });
  return Buffer.from(r.reply?.message ?? new Uint8Array()).toString("utf8");
}

/** Every record of the journal stream, in stream order (a plain read, not the coordinator's code). */
async function journalRecords(url: string): Promise<JournalRecord[]> {
  const nc = await connectAudit({ servers: url, credentials: { kind: "none" }, name: "test-journal-reader" });
  try {
    const jsm = await jetstreamManager(nc);
    const info = await jsm.streams.info("WARDEN_JOURNAL");
    const out: JournalRecord[] = [];
    for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
      const m = await jsm.streams.getMessage("WARDEN_JOURNAL", { seq });
      if (m !== null) out.push(decodeJournalRecord(Buffer.from(m.data), 1 << 20));
    }
    return out;
  } finally {
    await nc.close();
  }
}

const sleepMs = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe("coordinator HA: an ex-leader resumed after a pause past its lease changes nothing", { timeout: 240_000 }, () => {
  it("SIGSTOP past the lease, takeover, SIGCONT: no event of the old epoch after the new one's, no node.unreachable from it, no stop journaled, the backend untouched (same pid, still serving)", async () => {
    const c = await ha.start({
      name: "ha-fence",
      // `slow`: pinned (never idle), each call takes 3 s — one in flight keeps the old leader's shutdown busy after it wakes.
      models: [simModel("warm", { selector: { node: "a" } }), simModel("slow", { selector: { node: "a" }, pinned: true, knobs: { predict_delay_ms: 3_000 } })],
      // Heartbeats silent for 8 s make a node unreachable in a leader's view (the old one's, on waking, after 15 s).
      config: { nodeGrace: "8s", loadWait: "150s", policy: { tickInterval: "100ms", enforcementRetries: 600, enforcementRetryInterval: "250ms", idleCheck: true, idleTimeout: "8s" } },
      // The servers drop a client that answers no ping for about 6 s, as a real deployment drops a
      // stopped process: the old leader then wakes with its timers due before it hears of the new leader.
      natsConfig: ["ping_interval: \"2s\"", "ping_max: 2"],
    }, 150);
    const url = c.nats.urls.join(",");
    await c.addAgent("a");
    const first = await c.leader();
    const old = first.coord;
    const slowInc = (await old.admin.loadModel({ model: "slow" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    const inc = (await old.admin.loadModel({ model: "warm" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    expect(inc).not.toBe("");
    expect(await predictVia(old, "warm")).not.toBe("");
    const before = (await runningBackends(c.tag)).sort((x, y) => x.incarnation.localeCompare(y.incarnation));
    expect(before.map((b) => b.incarnation)).toEqual([inc, slowInc].sort());

    // Last use in the old leader's view is now; it sleeps well past its lease and the idle timeout.
    const pausedAt = Date.now();
    old.pause();
    const next = await c.leader(60_000, new Set([old.index]));
    expect(next.status.epoch).toBeGreaterThan(first.status.epoch);
    await until("the new leader adopted both backends", async () => (await next.coord.admin.listModels({})).instances.filter((i) => i.state === InstanceState.READY).length === 2, 60_000);
    // The new leader keeps the model busy: in its view it is never idle.
    const warming = { on: true };
    const warm = (async () => {
      while (warming.on) {
        await predictVia(next.coord, "warm").catch(() => "");
        await sleepMs(1_000);
      }
    })();
    try {
      // The scenario, not an assertion: the old leader wakes 15 s after it was stopped,
      // with a call waiting for it (a client that still routes through it).
      await sleepMs(Math.max(0, 14_000 - (Date.now() - pausedAt)));
      const inFlight = predictVia(old, "slow").catch(() => "");
      await sleepMs(Math.max(0, 15_000 - (Date.now() - pausedAt)));
      old.resume();
      await inFlight;
      await until("the old leader stands by", async () => (await old.status())?.self?.role === "standby", 60_000);
      // Give a stale view every chance to act on its wake-up (its tick is 100 ms, its health check 1 s).
      await sleepMs(3_000);
    } finally {
      warming.on = false;
      await warm;
    }

    // The backend: the same process, and its model still loaded (a Free from the old leader would have unloaded it).
    expect((await runningBackends(c.tag)).sort((x, y) => x.incarnation.localeCompare(y.incarnation)).map((b) => [b.incarnation, b.pid])).toEqual(before.map((b) => [b.incarnation, b.pid]));
    expect(await predictVia(next.coord, "warm")).not.toBe("");
    expect((await next.coord.admin.listModels({})).instances.find((i) => i.incarnation === inc)?.state).toBe(InstanceState.READY);

    // The audit stream, read directly: coordinator epochs never go backwards, and the old epoch adds nothing after the new one began.
    const stream = dedupById((await storedEvents(url)) ?? []).events;
    const epochs = stream.map((e) => e.sequence?.epoch ?? 0n);
    const oldEpoch = stream.find((e) => e.incarnation === inc)?.sequence?.epoch;
    expect(oldEpoch).toBeDefined();
    const firstNew = epochs.findIndex((e) => e > oldEpoch!);
    expect(firstNew).toBeGreaterThanOrEqual(0);
    const backwards = stream.slice(firstNew).filter((e) => (e.sequence?.epoch ?? 0n) < epochs[firstNew]!);
    expect(backwards.map((e) => `${eventTypeOf(e)} ${e.nodeId} epoch ${String(e.sequence?.epoch)}`)).toEqual([]);
    expect(stream.filter((e) => e.payload.case === "nodeUnreachable" && e.sequence?.epoch === oldEpoch).map((e) => e.nodeId)).toEqual([]);
    expect(stream.filter((e) => e.incarnation === inc && e.payload.case === "evictionStarted")).toEqual([]);

    // The journal stream, read directly: no stop of the backend was ever recorded (the next leader would carry it out).
    const records = await journalRecords(url);
    expect(records.filter((r) => (r.kind === "stop-intent" && r.incarnation === inc) || (r.kind === "event" && r.event.incarnation === inc && r.event.payload.case === "evictionStarted"))).toEqual([]);
  });
});
