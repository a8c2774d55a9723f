import { afterAll, beforeAll } from "vitest";
import type { NatsConnection } from "@nats-io/transport-node";
import { connectAudit } from "@warden/audit";
import { startNatsCluster, type NatsClusterHandle } from "./nats-cluster.js";

export interface ScratchJetStream {
  /** The file's 3-server cluster (started before its first test). */
  readonly cluster: NatsClusterHandle;
  /** A new connection to every server (reconnect wait 100 ms), closed after the file. */
  connect(): Promise<NatsConnection>;
  /** A fresh stream and subject per call (`<stream>1`, `<subject>1`, …), so tests do not see each other's records. */
  streamName(): { stream: string; subject: string };
}

/**
 * A 3-server nats-server JetStream cluster for one test file, registered at
 * the file's top level: started before the first test, its connections closed
 * and its servers stopped after the last.
 */
export function scratchJetStream(prefix: { readonly stream: string; readonly subject: string }): ScratchJetStream {
  let cluster: NatsClusterHandle | undefined;
  const conns: NatsConnection[] = [];
  let seq = 0;
  beforeAll(async () => {
    cluster = await startNatsCluster();
  });
  afterAll(async () => {
    for (const nc of conns) await nc.close().catch(() => undefined);
    await cluster?.stop();
  });
  const started = (): NatsClusterHandle => {
    if (cluster === undefined) throw new Error("the scratch JetStream cluster is used before its beforeAll ran");
    return cluster;
  };
  return {
    get cluster() {
      return started();
    },
    async connect() {
      const nc = await connectAudit({ servers: [...started().urls], reconnectTimeWaitMs: 100 });
      conns.push(nc);
      return nc;
    },
    streamName() {
      seq++;
      return { stream: `${prefix.stream}${String(seq)}`, subject: `${prefix.subject}${String(seq)}` };
    },
  };
}
