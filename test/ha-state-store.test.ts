import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { connectAudit } from "@warden/audit";
import { Code, isWardenError } from "@warden/common";
import { openKvStateStore } from "../services/coordinator/src/ha/kv-state-store.js";
import { startNatsCluster, type NatsClusterHandle } from "./support/nats-cluster.js";

let cluster: NatsClusterHandle;
const conns: NatsConnection[] = [];
async function connect(): Promise<NatsConnection> {
  const nc = await connectAudit({ servers: [...cluster.urls], reconnectTimeWaitMs: 100 });
  conns.push(nc);
  return nc;
}
const code = (c: Code) => (e: unknown) => isWardenError(e, c);

beforeAll(async () => {
  cluster = await startNatsCluster();
});
afterAll(async () => {
  for (const nc of conns) await nc.close().catch(() => undefined);
  await cluster.stop();
});

describe("durable state on JetStream KV (R3)", () => {
  it("revision-checked writes: a stale revision is ABORTED and changes nothing; a second connection loads what the first wrote", async () => {
    const s = await openKvStateStore(await connect(), { bucket: "state-a" });
    // Ids that are not KV key tokens (dots, spaces, unicode) round-trip.
    const node = "gpu node.7/ü";
    const r1 = await s.put("drain", node, { force: false, operator: "ops" }, 0);
    await expect(s.put("drain", node, { force: true }, 0)).rejects.toSatisfy(code(Code.Aborted));
    const r2 = await s.put("drain", node, { force: true, operator: "ops" }, r1);
    expect(r2).toBeGreaterThan(r1);
    await expect(s.put("drain", node, { force: false }, r1)).rejects.toSatisfy(code(Code.Aborted));
    await s.put("drain", "n2", { force: false }, 0);
    await s.put("scale", "m_1", { minReplicas: 2 }, 0);

    const other = await openKvStateStore(await connect(), { bucket: "state-a" });
    expect(await other.get("drain", node)).toEqual({ value: { force: true, operator: "ops" }, revision: r2 });
    const drains = await other.load("drain");
    expect([...drains.keys()].sort()).toEqual([node, "n2"].sort());
    expect(drains.get(node)?.value).toEqual({ force: true, operator: "ops" });

    await expect(other.remove("drain", node, r1)).rejects.toSatisfy(code(Code.Aborted));
    await other.remove("drain", node, r2);
    expect(await s.get("drain", node)).toBeUndefined();
    expect([...(await s.load("drain")).keys()]).toEqual(["n2"]);
    // Re-created after removal with revision 0, as a new entry.
    await s.put("drain", node, { force: false }, 0);
    expect((await s.get("drain", node))?.value).toEqual({ force: false });
    // No direct gets (any replica answers those on 2.9, a lagging one too: a takeover read an
    // acked policy as absent); every get goes through the stream leader.
    const jsm = await jetstreamManager(await connect());
    expect((await jsm.streams.info("KV_state-a")).config.allow_direct).toBe(false);
  });

  it("rejects bad input whole (INVALID_ARGUMENT naming the field) and stores nothing", async () => {
    const s = await openKvStateStore(await connect(), { bucket: "state-b", maxValueBytes: 64 });
    await expect(s.put("policy", "cluster", { blob: "x".repeat(100) }, 0)).rejects.toSatisfy((e: unknown) => isWardenError(e, Code.InvalidArgument) && /value/.test(String(e)));
    await expect(s.put("policy", "", {}, 0)).rejects.toSatisfy((e: unknown) => isWardenError(e, Code.InvalidArgument) && /id/.test(String(e)));
    await expect(s.put("nope" as "policy", "x", {}, 0)).rejects.toSatisfy((e: unknown) => isWardenError(e, Code.InvalidArgument) && /section/.test(String(e)));
    expect((await s.load("policy")).size).toBe(0);
    await expect(openKvStateStore(conns[0]!, { replicas: 7 })).rejects.toSatisfy(code(Code.InvalidArgument));
  });

  it("without quorum a write fails UNAVAILABLE naming the bucket within its deadline; after a restart it writes again", async () => {
    const nc = await connect();
    const opTimeoutMs = 2_000;
    const s = await openKvStateStore(nc, { bucket: "state-c", opTimeoutMs });
    const r = await s.put("lost-node", "b", { reason: "rack fire" }, 0);
    await cluster.kill(1);
    await cluster.kill(2);
    const t = Date.now();
    const err = await s.put("lost-node", "b", { reason: "again" }, r).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isWardenError(err, Code.Unavailable)).toBe(true);
    expect(String(err)).toContain("state-c");
    expect(Date.now() - t).toBeLessThan(opTimeoutMs + 10_000);
    await cluster.restart(1);
    // The stream needs a leader again: retried until it answers (a condition, not a sleep).
    const end = Date.now() + 60_000;
    for (;;) {
      const done = await s
        .get("lost-node", "b")
        .then(async (current) => s.put("lost-node", "b", { reason: "back" }, current?.revision ?? 0))
        .then(
          () => true,
          () => false,
        );
      if (done) break;
      if (Date.now() > end) throw new Error("state store did not come back within 60 s");
      await new Promise((r) => setTimeout(r, 50)); // poll interval while the stream elects a leader
    }
    expect((await s.get("lost-node", "b"))?.value).toEqual({ reason: "back" });
    await cluster.restart(2);
  });
});
