import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kvm, type KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { connectAudit } from "@warden/audit";
import { startNatsCluster, type NatsClusterHandle } from "./support/nats-cluster.js";

/** Retries `op` until it succeeds (a cluster re-elects stream leaders after a kill) or the deadline passes. */
async function eventually<T>(op: () => Promise<T>, deadlineMs = 60_000): Promise<T> {
  const until = Date.now() + deadlineMs;
  for (;;) {
    try {
      return await op();
    } catch (err) {
      if (Date.now() > until) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

describe("nats-cluster harness: 3 nats-server, JetStream, loopback", () => {
  let cluster: NatsClusterHandle;
  let nc: NatsConnection;
  let kv: KV;

  beforeAll(async () => {
    cluster = await startNatsCluster();
    nc = await connectAudit({ servers: cluster.urls, reconnectTimeWaitMs: 100, connectTimeoutMs: 2_000 });
    // Read through the stream leader, as Warden's buckets are (lease-bucket.ts): a direct get may be
    // answered by a replica that has not applied the last write yet (seen under load: "one" after "two" was acked).
    kv = await eventually(() => new Kvm(nc).create("harness", { replicas: 3, history: 1, timeout: 2_000, allow_direct: false }));
  });

  afterAll(async () => {
    await nc.close();
    await cluster.stop();
  });

  it("has a meta leader that every server names, among its own servers", async () => {
    const leader = await cluster.waitForMetaLeader();
    expect(cluster.servers.map((s) => s.name)).toContain(leader);
  });

  it("a replicas-3 bucket survives one server killed; refuses writes without quorum; recovers on restart", async () => {
    const r1 = await kv.put("k", "one");
    await cluster.kill(0);
    expect(cluster.running(0)).toBe(false);
    const r2 = await eventually(() => kv.put("k", "two"));
    expect(r2).toBeGreaterThan(r1);
    expect((await eventually(() => kv.get("k")))?.string()).toBe("two");

    await cluster.kill(1);
    // One server of three: no stream leader can be elected, every write must fail.
    for (let i = 0; i < 3; i++) await expect(kv.put("k", `lost-${String(i)}`, { timeout: 1_500 })).rejects.toThrow();

    await cluster.restart(1);
    const r3 = await eventually(() => kv.put("k", "three", { timeout: 2_000 }));
    expect(r3).toBeGreaterThan(r2);
    expect((await eventually(() => kv.get("k")))?.string()).toBe("three");
    await cluster.restart(0);
    expect(cluster.running(0)).toBe(true);
  });
});
