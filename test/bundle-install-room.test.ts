/**
 * A backend bundle's install makes room in the disk budget, through a real
 * agent process and real starts: a bundle that fits only once an older
 * unused model file goes evicts that file (logged as any eviction, for the
 * install) and leaves the cache within its budget as measured on disk; one
 * that cannot fit even after every unused file went fails the start
 * ARTIFACT_NO_SPACE naming the bundle, with nothing evicted, nothing
 * installed and no staging directory left. The bundle's own tarball is not
 * counted as room: the install still has to read it.
 */
import { mkdir, readdir, stat, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createClient } from "@warden/grpc";
import { AgentService, StartFailureCode, type StartBackendResponse } from "@warden/proto";
import { diskUsage } from "../services/agent/src/disk-usage.js";
import { newIncarnation, randomPortRange, testTagVar, uniqueTag } from "./support/agent-harness.js";
import { startAgentProcess, writeAgentConfig, type AgentProcess } from "./support/agent-process.js";
import { artifactAgentRig } from "./support/artifact-agent-rig.js";
import { bytesOf, sha256Hex } from "./support/artifact-server.js";
import { tarOf } from "./support/oci-registry.js";

const fileTag = uniqueTag("bundle-room");
const rig = artifactAgentRig("warden-bundle-room", fileTag);
const ports = randomPortRange(6);
const root = join(import.meta.dirname, "..");
const simMain = join(root, "services", "cli", "dist", "backend-sim.js");

/** A LocalAI-style bundle (run.sh starts backend-sim) padded with 1 MB: an uncompressed tar, so the pulled tarball is as big as what it unpacks to. */
function publishBundle(name: string, seed: number): { source: string; sha256: string; sizeBytes: number } {
  const runSh = `#!/bin/sh\nexec "${process.execPath}" "${simMain}" "$@"\n`;
  const body = tarOf([{ name: "run.sh", body: runSh, mode: 0o755 }, { name: "payload", body: bytesOf(1_000_000, seed) }], false);
  rig.server.files.set(`/${name}`, body);
  return { source: `${rig.server.url}/${name}`, sha256: sha256Hex(body), sizeBytes: body.length };
}

/** A verified model file in the cache, last used long ago (its mtime, as the agent reads it at startup). */
async function cachedFile(modelsPath: string, sizeBytes: number, seed: number): Promise<string> {
  const body = bytesOf(sizeBytes, seed);
  const sha = sha256Hex(body);
  const f = join(modelsPath, ".warden-cache", "sha256", sha);
  await mkdir(join(modelsPath, ".warden-cache", "sha256"), { recursive: true });
  await writeFile(f, body);
  await utimes(f, 1_000_000, 1_000_000);
  return sha;
}

/** What the budget counts, measured on disk: files' sizes under sha256/ and partial/, each installed bundle's blocks. */
async function measuredCacheBytes(modelsPath: string): Promise<number> {
  let total = 0;
  for (const sub of ["sha256", "partial"]) {
    for (const n of await readdir(join(modelsPath, ".warden-cache", sub)).catch(() => [] as string[])) total += (await stat(join(modelsPath, ".warden-cache", sub, n))).size;
  }
  for (const n of await readdir(join(modelsPath, ".warden-cache", "backends")).catch(() => [] as string[])) total += await diskUsage(join(modelsPath, ".warden-cache", "backends", n));
  return total;
}

/** Writes the config of an agent whose catalog entry `bundled` is the bundle; returns its models path and config path. */
async function configWith(name: string, budgetBytes: number, bundle: { source: string; sha256: string; sizeBytes: number }): Promise<{ modelsPath: string; configPath: string }> {
  const modelsPath = join(rig.dir, `models-${name}`);
  const configPath = join(rig.dir, `agent-${name}.yaml`);
  await writeAgentConfig(configPath, {
    nodeId: `bundle-room-${name}`,
    stateDir: join(rig.dir, `state-${name}`),
    modelsPath,
    artifactCacheBudget: budgetBytes,
    ports: { min: ports.min, max: ports.max, quarantine: "0s" },
    catalog: { bundled: { bundle, env: { [testTagVar]: fileTag } } },
    grace: "5s",
    readiness: { attempts: 100, interval: "200ms", initialInterval: "25ms" },
    nvidiaSmi: "",
    orphanScanInterval: "1h",
  });
  return { modelsPath, configPath };
}

async function startOf(proc: AgentProcess): Promise<StartBackendResponse[]> {
  const client = createClient(AgentService, proc.address);
  try {
    const events: StartBackendResponse[] = [];
    for await (const ev of client.startBackend({ incarnation: newIncarnation(), model: "m", backend: "bundled" }, { timeoutMs: 60_000 })) events.push(ev);
    return events;
  } finally {
    client.close();
  }
}

const show = (events: readonly StartBackendResponse[]): string => events.map((e) => (e.event.case === "failed" ? `failed: ${e.event.value.message}` : (e.event.case ?? "none"))).join(", ");
const evictions = (proc: AgentProcess): { sha256?: string; kind?: string; forSha256?: string }[] => proc.lines.map((l) => JSON.parse(l) as { msg?: string; sha256?: string; kind?: string; forSha256?: string }).filter((o) => o.msg === "artifact evicted");

describe("a bundle's install makes room in the disk budget (real agent)", () => {
  it("evicts an older unused model file for the unpacked bundle: the cache measures within its budget once the bundle runs", async () => {
    const bundle = publishBundle("fits.tar", 21);
    // 2 MB old file + the 1 MB tarball fit the 3.5 MB budget; the 1 MB unpacked bundle beside them does not.
    const budgetBytes = 3_500_000;
    const { modelsPath, configPath } = await configWith("fits", budgetBytes, bundle);
    const oldSha = await cachedFile(modelsPath, 2_000_000, 22);
    const proc = await startAgentProcess(configPath, ["--stop-backends-on-exit"]);
    rig.started.push(proc);
    try {
      const events = await startOf(proc);
      expect(events[events.length - 1]?.event.case, show(events)).toBe("ready");

      expect(await readdir(join(modelsPath, ".warden-cache", "backends"))).toEqual([bundle.sha256]);
      // The old file went; the bundle's tarball (just used) stays.
      expect((await readdir(join(modelsPath, ".warden-cache", "sha256"))).sort()).toEqual([bundle.sha256]);
      expect(evictions(proc).map((o) => [o.sha256, o.kind, o.forSha256])).toEqual([[oldSha, "final", bundle.sha256]]);
      const measured = await measuredCacheBytes(modelsPath);
      expect(measured).toBeGreaterThan(2_000_000);
      expect(measured).toBeLessThanOrEqual(budgetBytes);
    } finally {
      await proc.terminate();
    }
  }, 120_000);

  it("a bundle that cannot fit even after every unused file went fails ARTIFACT_NO_SPACE naming it: nothing evicted, installed or left staged", async () => {
    const bundle = publishBundle("toobig.tar", 31);
    // The 1 MB tarball fits beside the 0.5 MB old file in 1.8 MB; its 1 MB unpacked does not, even without the old file
    // (the tarball itself is not room: the install reads it).
    const { modelsPath, configPath } = await configWith("toobig", 1_800_000, bundle);
    const oldSha = await cachedFile(modelsPath, 500_000, 32);
    const proc = await startAgentProcess(configPath, ["--stop-backends-on-exit"]);
    rig.started.push(proc);
    try {
      const events = await startOf(proc);
      const last = events[events.length - 1]?.event;
      expect(last?.case, show(events)).toBe("failed");
      if (last?.case !== "failed") return;
      expect(StartFailureCode[last.value.code]).toBe(StartFailureCode[StartFailureCode.ARTIFACT_NO_SPACE]);
      expect(last.value.message).toContain(`backend bundle ${bundle.source} (sha256 ${bundle.sha256})`);
      expect(last.value.message).toContain("no space left in the artifact cache: the bundle unpacks to more than");
      // Only the old file counts as room to make: the tarball the install reads is in use.
      expect(last.value.message).toContain(`evicting every file no backend uses would free 500000 (${String(bundle.sizeBytes)} in use)`);
      expect(events.some((e) => e.event.case === "spawned")).toBe(false);

      expect(evictions(proc)).toEqual([]);
      expect((await readdir(join(modelsPath, ".warden-cache", "sha256"))).sort()).toEqual([oldSha, bundle.sha256].sort());
      // No installed bundle and no `.partial-<digest>` staging directory.
      expect(await readdir(join(modelsPath, ".warden-cache", "backends"))).toEqual([]);
      expect(await measuredCacheBytes(modelsPath)).toBeLessThanOrEqual(1_800_000);
    } finally {
      await proc.terminate();
    }
  }, 120_000);
});
