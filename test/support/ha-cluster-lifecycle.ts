import { afterAll, afterEach, expect, onTestFailed } from "vitest";
import { liveTaggedSims } from "./agent-harness.js";
import { liveRemoteAgents } from "./agent-process.js";
import { startHaCluster, type HaCluster, type HaClusterOptions } from "./ha-cluster.js";

export interface HaClusterLifecycle {
  /**
   * Starts the test's cluster (ha-cluster.ts). It is closed after the test; if
   * the test fails, each coordinator's last `logLines` JSON log lines and its
   * stderr are printed (a failure here is a distributed one: what each
   * coordinator logged is the only account of it).
   */
  start(o: HaClusterOptions, logLines?: number): Promise<HaCluster>;
}

/**
 * The lifecycle the HA test files on ha-cluster.ts share, registered once at
 * the file's top level: after each test the cluster closes (agents,
 * coordinators, nats-servers, temp dirs); after the file no backend a cluster
 * tagged and no remote agent may still run (a leak fails the file).
 */
export function haClusterLifecycle(): HaClusterLifecycle {
  let cluster: HaCluster | undefined;
  const tags: string[] = [];

  afterEach(async () => {
    await cluster?.close();
    cluster = undefined;
  });

  afterAll(async () => {
    for (const t of tags) expect(await liveTaggedSims(t)).toEqual([]);
    expect(await liveRemoteAgents()).toEqual([]);
  });

  return {
    async start(o, logLines = 120) {
      const c = await startHaCluster(o);
      cluster = c;
      tags.push(c.tag);
      onTestFailed(() => {
        for (const co of c.coords) console.error(`--- coordinator ${String(co.index)}, last log lines:\n${co.recentLines.slice(-logLines).join("\n")}\n--- stderr:\n${co.stderr.join("").slice(-2_000)}`);
      });
      return c;
    },
  };
}
