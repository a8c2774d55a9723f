/**
 * A takeover's reads of the state bucket with one of three nats-servers lost
 * (real 3-server JetStream cluster): the lost server leads neither the bucket's
 * stream nor the JetStream meta group, so nothing the load needs is gone.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { connectAudit } from "@warden/audit";
import { openKvStateStore } from "../services/coordinator/src/ha/kv-state-store.js";
import type { DurableStateStore } from "../services/coordinator/src/ha/durable-state-port.js";
import { until } from "./support/coordinator-harness.js";
import { startNatsCluster, type NatsClusterHandle } from "./support/nats-cluster.js";

let cluster: NatsClusterHandle;
let nc: NatsConnection;

beforeAll(async () => {
  cluster = await startNatsCluster();
  nc = await connectAudit({ servers: cluster.urls, name: "ha-state-load", reconnectTimeWaitMs: 250, connectTimeoutMs: 2_000 });
}, 90_000);
afterAll(async () => {
  await nc.close();
  await cluster.stop();
}, 60_000);

async function metaLeader(): Promise<string | undefined> {
  const r = await fetch(`http://127.0.0.1:${String(cluster.servers[0]!.httpPort)}/jsz`);
  return ((await r.json()) as { meta_cluster?: { leader?: string } }).meta_cluster?.leader;
}

describe("state bucket load with one server lost", { timeout: 120_000 }, () => {
  it("every load answers, whole, once the client has reconnected: it needs no consumer, which nats-server 2.9 may place on the lost server", async () => {
    const store: DurableStateStore = await openKvStateStore(nc, { replicas: 3 });
    for (const id of ["n1", "n2", "n3"]) await store.put("drain", id, { reason: id }, 0);
    const streamLeader = (await (await jetstreamManager(nc)).streams.info("KV_warden-state")).cluster?.leader;
    const meta = await metaLeader();
    const victim = cluster.servers.findIndex((s) => s.name !== streamLeader && s.name !== meta);
    expect(victim).toBeGreaterThanOrEqual(0);
    await cluster.kill(victim);
    // The client may have been on the lost server: one answered load says it reconnected.
    await until("a load after the client reconnected", async () => (await store.load("drain").catch(() => undefined)) !== undefined, 60_000);
    const outcomes: string[] = [];
    for (let i = 0; i < 12; i++) {
      outcomes.push(
        await store.load("drain").then(
          (m) => [...m.keys()].sort().join(","),
          (err: unknown) => String(err),
        ),
      );
    }
    expect(outcomes).toEqual(outcomes.map(() => "n1,n2,n3"));
  });
});
