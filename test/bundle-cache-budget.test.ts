/**
 * Installed backend bundles in the disk budget, through a real agent process:
 * a bundle installed before the agent started counts with its size on disk,
 * and a pull for a real start of backend-sim that needs the room evicts it
 * (least recently used, no backend runs it) — renamed away and deleted, the
 * eviction logged with kind bundle, and ListBundles no longer calls it
 * installed; a bundle whose backend runs is never evicted, also when that
 * leaves no room.
 */
import { mkdir, readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createClient } from "@warden/grpc";
import { AgentService, type StartBackendResponse } from "@warden/proto";
import { newIncarnation, randomPortRange, simCatalog, testTagVar, uniqueTag } from "./support/agent-harness.js";
import { startAgentProcess, writeAgentConfig } from "./support/agent-process.js";
import { artifactAgentRig } from "./support/artifact-agent-rig.js";
import { bytesOf, sha256Hex } from "./support/artifact-server.js";

const fileTag = uniqueTag("bundle-budget");
const rig = artifactAgentRig("warden-bundle-budget", fileTag);
const ports = randomPortRange(6);
const bundleSha = "b".repeat(64);
const runningSha = "c".repeat(64);
const root = join(import.meta.dirname, "..");
const simMain = join(root, "services", "cli", "dist", "backend-sim.js");

describe("installed bundles in the disk budget (real agent)", () => {
  it("a pull that needs the room evicts an unused installed bundle: gone from disk and from ListBundles, logged as kind bundle", async () => {
    const modelsPath = join(rig.dir, "models");
    const configPath = join(rig.dir, "agent.yaml");
    // A 2.5 MB installed bundle in a 3.5 MB budget: a 1.5 MB pull does not fit beside it.
    const bundleDir = join(modelsPath, ".warden-cache", "backends", bundleSha);
    await mkdir(bundleDir, { recursive: true });
    await writeFile(join(bundleDir, "run.sh"), "#!/bin/sh\nexit 1\n", { mode: 0o755 });
    await writeFile(join(bundleDir, "payload"), bytesOf(2_500_000, 7));
    await writeAgentConfig(configPath, {
      nodeId: "bundle-budget",
      stateDir: join(rig.dir, "state"),
      modelsPath,
      artifactCacheBudget: 3_500_000,
      ports: { min: ports.min, max: ports.max, quarantine: "0s" },
      catalog: { sim: simCatalog(fileTag), old: { bundle: { source: "https://example.invalid/old.tar", sha256: bundleSha, sizeBytes: 1 } } },
      grace: "5s",
      readiness: { attempts: 100, interval: "200ms", initialInterval: "25ms" },
      nvidiaSmi: "",
      orphanScanInterval: "1h",
    });
    const proc = await startAgentProcess(configPath, ["--stop-backends-on-exit"]);
    rig.started.push(proc);
    const client = createClient(AgentService, proc.address);
    try {
      expect((await client.listBundles({})).bundles.map((b) => [b.backend, b.installed])).toEqual([["old", true]]);
      const body = bytesOf(1_500_000, 8);
      rig.server.files.set("/m.bin", body);
      const artifact = { source: `${rig.server.url}/m.bin`, sha256: sha256Hex(body), sizeBytes: 1_500_000n, path: "models/m.bin" };
      const events: StartBackendResponse[] = [];
      const req = { incarnation: newIncarnation(), model: "m", backend: "sim", modelFile: artifact.path, artifacts: [artifact], options: [`sim.model_file_sha256:${artifact.sha256}`] };
      for await (const ev of client.startBackend(req, { timeoutMs: 60_000 })) events.push(ev);
      const lastEv = events[events.length - 1]?.event;
      expect(lastEv?.case, events.map((e) => (e.event.case === "failed" ? e.event.value.message : e.event.case)).join(", ")).toBe("ready");

      expect(await readdir(join(modelsPath, ".warden-cache", "backends"))).toEqual([]);
      expect((await client.listBundles({})).bundles.map((b) => [b.backend, b.installed])).toEqual([["old", false]]);
      const lines = proc.lines.map((l) => JSON.parse(l) as { msg?: string; sha256?: string; kind?: string; sizeBytes?: number; forSha256?: string });
      const ev = lines.filter((o) => o.msg === "artifact evicted");
      expect(ev.map((o) => [o.sha256, o.kind, o.forSha256])).toEqual([[bundleSha, "bundle", artifact.sha256]]);
      expect(ev[0]?.sizeBytes).toBeGreaterThanOrEqual(2_500_000);
    } finally {
      client.close();
      await proc.terminate();
    }
  }, 120_000);

  it("never evicts the bundle of a running backend: the pull fails for want of room until that backend stopped", async () => {
    const modelsPath = join(rig.dir, "models-running");
    const configPath = join(rig.dir, "agent-running.yaml");
    // A LocalAI-style bundle whose run.sh starts backend-sim (as LocalAI runs run.sh: `--addr host:port`), padded to 2.5 MB.
    const bundleDir = join(modelsPath, ".warden-cache", "backends", runningSha);
    await mkdir(bundleDir, { recursive: true });
    await writeFile(join(bundleDir, "run.sh"), `#!/bin/sh\nexec "${process.execPath}" "${simMain}" "$@"\n`, { mode: 0o755 });
    await writeFile(join(bundleDir, "payload"), bytesOf(2_500_000, 9));
    await writeAgentConfig(configPath, {
      nodeId: "bundle-budget-running",
      stateDir: join(rig.dir, "state-running"),
      modelsPath,
      artifactCacheBudget: 3_500_000,
      ports: { min: ports.min, max: ports.max, quarantine: "0s" },
      catalog: { sim: simCatalog(fileTag), run: { bundle: { source: "https://example.invalid/run.tar", sha256: runningSha, sizeBytes: 1 }, env: { [testTagVar]: fileTag } } },
      grace: "5s",
      readiness: { attempts: 100, interval: "200ms", initialInterval: "25ms" },
      nvidiaSmi: "",
      orphanScanInterval: "1h",
    });
    const proc = await startAgentProcess(configPath, ["--stop-backends-on-exit"]);
    rig.started.push(proc);
    const client = createClient(AgentService, proc.address);
    const startOf = async (req: Record<string, unknown>): Promise<StartBackendResponse[]> => {
      const events: StartBackendResponse[] = [];
      for await (const ev of client.startBackend({ incarnation: newIncarnation(), ...req }, { timeoutMs: 60_000 })) events.push(ev);
      return events;
    };
    const show = (events: readonly StartBackendResponse[]): string => events.map((e) => (e.event.case === "failed" ? `failed: ${e.event.value.message}` : (e.event.case ?? "none"))).join(", ");
    try {
      const runIncarnation = newIncarnation();
      const bundled = await startOf({ incarnation: runIncarnation, model: "r", backend: "run" });
      expect(bundled[bundled.length - 1]?.event.case, show(bundled)).toBe("ready");
      const spawned = bundled.find((e) => e.event.case === "spawned")?.event;
      const runAddress = spawned?.case === "spawned" ? spawned.value.address : "";

      const body = bytesOf(1_500_000, 10);
      rig.server.files.set("/n.bin", body);
      const artifact = { source: `${rig.server.url}/n.bin`, sha256: sha256Hex(body), sizeBytes: 1_500_000n, path: "models/n.bin" };
      const req = { model: "n", backend: "sim", modelFile: artifact.path, artifacts: [artifact], options: [`sim.model_file_sha256:${artifact.sha256}`] };
      const refused = await startOf(req);
      const last = refused[refused.length - 1]?.event;
      expect(last?.case, show(refused)).toBe("failed");
      if (last?.case === "failed") expect(last.value.message).toContain("no space left in the artifact cache");
      expect(await readdir(join(modelsPath, ".warden-cache", "backends"))).toEqual([runningSha]);
      expect(proc.lines.filter((l) => (JSON.parse(l) as { msg?: string }).msg === "artifact evicted")).toEqual([]);

      // Stopped, it is an unused bundle like any other: the same start now evicts it.
      await client.stopBackend({ address: runAddress, incarnation: runIncarnation, force: true, reason: "admin" }, { timeoutMs: 30_000 });
      const again = await startOf(req);
      expect(again[again.length - 1]?.event.case, show(again)).toBe("ready");
      expect(await readdir(join(modelsPath, ".warden-cache", "backends"))).toEqual([]);
    } finally {
      client.close();
      await proc.terminate();
    }
  }, 120_000);
});
