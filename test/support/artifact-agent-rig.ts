import { rm } from "node:fs/promises";
import { afterAll, beforeAll, expect } from "vitest";
import { killLeftBehind, liveTaggedSims, tempDir } from "./agent-harness.js";
import type { AgentProcess } from "./agent-process.js";
import { startArtifactServer, type ArtifactServer } from "./artifact-server.js";

/** What a real-agent artifact test shares: an origin, a private directory, and the agents it started. */
export interface ArtifactAgentRig {
  /** Set once beforeAll ran. */
  server: ArtifactServer;
  dir: string;
  /** Push each agent started: afterAll stops those still running. */
  readonly started: AgentProcess[];
}

/**
 * Registers the file's beforeAll/afterAll: a real artifact HTTP server and a
 * temp directory before; after, agents still running are stopped, backend-sims
 * of `fileTag` left behind are killed (and fail the file), the server closed
 * and the directory removed.
 */
export function artifactAgentRig(dirPrefix: string, fileTag: string): ArtifactAgentRig {
  const rig = { started: [] as AgentProcess[] } as { server: ArtifactServer; dir: string; started: AgentProcess[] };
  beforeAll(async () => {
    rig.server = await startArtifactServer();
    rig.dir = await tempDir(dirPrefix);
  });
  afterAll(async () => {
    const leaked = await liveTaggedSims(fileTag);
    await killLeftBehind(rig.started, leaked);
    await rig.server.close();
    await rm(rig.dir, { recursive: true, force: true });
    expect(leaked).toEqual([]);
  });
  return rig;
}
