import { afterAll, afterEach, expect } from "vitest";
import { liveTaggedSims, uniqueTag } from "./agent-harness.js";
import { liveRemoteAgents, type RemoteAgent } from "./agent-process.js";
import type { TestCoordinator } from "./coordinator-harness.js";

/** One replica real-process test file's coordinator and agent processes, cleaned up after each test. */
export interface ReplicaCluster {
  /** Tags every backend-sim this file starts, so the file can check none outlives it. */
  readonly tag: string;
  tc: TestCoordinator | undefined;
  agents: RemoteAgent[];
}

/**
 * Registers the shared cleanup of the replica real-process tests
 * (test/replicas*.test.ts): after each test, `beforeClose` (calls a test
 * still holds, paused agents), then the coordinator, then every agent process,
 * and no agent process may be left; after the file, no backend-sim it tagged.
 */
export function replicaCluster(name: string, beforeClose?: () => Promise<void>): ReplicaCluster {
  const cl: ReplicaCluster = { tag: uniqueTag(name), tc: undefined, agents: [] };
  afterEach(async () => {
    await beforeClose?.();
    await cl.tc?.close();
    cl.tc = undefined;
    for (const a of cl.agents) await a.cleanup();
    cl.agents = [];
    expect(await liveRemoteAgents()).toEqual([]);
  });
  afterAll(async () => {
    expect(await liveTaggedSims(cl.tag)).toEqual([]);
  });
  return cl;
}
