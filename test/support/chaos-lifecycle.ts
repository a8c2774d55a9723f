import { afterAll, afterEach, expect } from "vitest";
import { liveTaggedSims } from "./agent-harness.js";
import { liveRemoteAgents } from "./agent-process.js";
import { endWatches } from "./chaos-checks.js";
import { startChaosCluster, type ChaosCluster, type ChaosClusterOptions } from "./chaos-cluster.js";

export interface ChaosLifecycle {
  /** Starts the test's cluster; it is closed after the test, and its backends checked gone after the file. */
  start(o: ChaosClusterOptions): Promise<ChaosCluster>;
}

/**
 * The lifecycle every chaos test file shares, registered once at the file's
 * top level: after each test the accounting watches end and the cluster closes
 * (agents, coordinator, nats-server, temp dirs); after the file no backend a
 * cluster tagged and no remote agent may still run (a leak fails the file).
 */
export function chaosLifecycle(): ChaosLifecycle {
  let cluster: ChaosCluster | undefined;
  const tags: string[] = [];

  afterEach(async () => {
    endWatches();
    await cluster?.close();
    cluster = undefined;
  });

  afterAll(async () => {
    for (const t of tags) expect(await liveTaggedSims(t)).toEqual([]);
    expect(await liveRemoteAgents()).toEqual([]);
  });

  return {
    async start(o) {
      cluster = await startChaosCluster(o);
      tags.push(cluster.tag);
      return cluster;
    },
  };
}
