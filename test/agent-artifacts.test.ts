/**
 * Artifacts pulled by a real agent process for real starts of backend-sim,
 * from a real HTTP server (node:http): the start stream's `pulling` phase,
 * one download for concurrent starts of one digest, typed failures that spawn
 * nothing, and a pull that survives kill -9 of the agent by resuming its
 * partial with a Range request.
 */
import { mkdir, readFile, readdir, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient, type Client } from "@warden/grpc";
import { AgentService, StartFailureCode, type StartBackendResponse } from "@warden/proto";
import { killLeftBehind, liveTaggedSims, newIncarnation, randomPortRange, simCatalog, tempDir, uniqueTag, waitFor } from "./support/agent-harness.js";
import { startAgentProcess, writeAgentConfig, type AgentProcess } from "./support/agent-process.js";
import { bytesOf, sha256Hex, startArtifactServer, type ArtifactServer } from "./support/artifact-server.js";

const fileTag = uniqueTag("agent-artifacts");
const ports = randomPortRange(12);
const started: AgentProcess[] = [];
let dir: string;
let modelsPath: string;
let configPath: string;
let server: ArtifactServer;
let n = 0;

async function agent(): Promise<{ proc: AgentProcess; client: Client<typeof AgentService> }> {
  const proc = await startAgentProcess(configPath, ["--stop-backends-on-exit"]);
  started.push(proc);
  return { proc, client: createClient(AgentService, proc.address) };
}

function publish(size: number): { artifact: { source: string; sha256: string; sizeBytes: bigint; path: string }; body: Buffer; name: string } {
  const name = `w${String(++n)}.bin`;
  const body = bytesOf(size, 100 + n);
  server.files.set(`/${name}`, body);
  return { artifact: { source: `${server.url}/${name}`, sha256: sha256Hex(body), sizeBytes: BigInt(size), path: `models/${name}` }, body, name };
}

async function start(client: Client<typeof AgentService>, model: string, artifact: { source: string; sha256: string; sizeBytes: bigint; path: string }, incarnation = newIncarnation(), signal?: AbortSignal): Promise<StartBackendResponse[]> {
  const out: StartBackendResponse[] = [];
  const req = { incarnation, model, backend: "sim", modelFile: artifact.path, artifacts: [artifact], options: [`sim.model_file_sha256:${artifact.sha256}`] };
  for await (const ev of client.startBackend(req, { timeoutMs: 60_000, ...(signal === undefined ? {} : { signal }) })) out.push(ev);
  return out;
}

/** The stream's cases, with a failure's message: what a failed expectation shows. */
function show(events: readonly StartBackendResponse[]): string {
  return events.map((e) => (e.event.case === "failed" ? `failed: ${e.event.value.message}` : (e.event.case ?? "none"))).join(", ");
}

function last(events: readonly StartBackendResponse[]): StartBackendResponse["event"] {
  return events[events.length - 1]?.event ?? { case: undefined };
}

beforeAll(async () => {
  server = await startArtifactServer();
  dir = await tempDir("warden-agent-artifacts");
  modelsPath = join(dir, "models");
  configPath = join(dir, "agent.yaml");
  await mkdir(modelsPath);
  await writeAgentConfig(configPath, {
    nodeId: "artifact-node",
    stateDir: join(dir, "state"),
    modelsPath,
    ports: { min: ports.min, max: ports.max, quarantine: "0s" },
    catalog: { sim: simCatalog(fileTag) },
    grace: "5s",
    readiness: { attempts: 100, interval: "200ms", initialInterval: "25ms" },
    nvidiaSmi: "",
    orphanScanInterval: "1h",
    artifactStallTimeout: "20s",
  });
});

afterAll(async () => {
  const leaked = await liveTaggedSims(fileTag);
  await killLeftBehind(started, leaked);
  await server.close();
  await rm(dir, { recursive: true, force: true });
  expect(leaked).toEqual([]);
});

describe("agent artifacts", () => {
  it("pulls, reports the pulling phase, loads the cached file; concurrent starts of one digest make one download", async () => {
    const a = await agent();
    try {
      const { artifact, body, name } = publish(1_500_000);
      server.chunkBytes = 100_000;
      server.paceMs = 50;
      const runs = await Promise.all(["m-a", "m-b", "m-c"].map((m) => start(a.client, m, artifact)));
      for (const events of runs) {
        expect(last(events).case, show(events)).toBe("ready");
        const pulling = events.flatMap((e) => (e.event.case === "pulling" ? [e.event.value] : []));
        expect(pulling.length).toBeGreaterThan(0);
        expect(pulling[pulling.length - 1]).toMatchObject({ sha256: artifact.sha256, path: artifact.path, doneBytes: artifact.sizeBytes, totalBytes: artifact.sizeBytes, verified: true });
        // pulled before anything was spawned
        expect(events.findIndex((e) => e.event.case === "spawned")).toBeGreaterThan(events.findIndex((e) => e.event.case === "pulling"));
      }
      expect(server.requestsFor(`/${name}`)).toHaveLength(1);
      expect((await readFile(join(modelsPath, ".warden-cache", "sha256", artifact.sha256))).equals(body)).toBe(true);
      // a later start of the same digest uses the cache: no request
      expect(last(await start(a.client, "m-d", artifact)).case).toBe("ready");
      expect(server.requestsFor(`/${name}`)).toHaveLength(1);
    } finally {
      server.paceMs = 0;
      a.client.close();
      await a.proc.terminate();
    }
  }, 120_000);

  it("a 404, a wrong digest and a dead source fail the start with typed codes naming the artifact, spawning nothing", async () => {
    const a = await agent();
    try {
      const { artifact } = publish(10_000);
      const cases: [typeof artifact, StartFailureCode, string][] = [
        [{ ...artifact, source: `${server.url}/missing.bin` }, StartFailureCode.ARTIFACT_NOT_FOUND, "HTTP 404"],
        [{ ...artifact, sha256: "3".repeat(64) }, StartFailureCode.ARTIFACT_DIGEST_MISMATCH, `hash to sha256 ${artifact.sha256}`],
        [{ ...artifact, source: "http://127.0.0.1:1/x.bin" }, StartFailureCode.ARTIFACT_SOURCE_UNAVAILABLE, "ECONNREFUSED"],
      ];
      for (const [bad, code, why] of cases) {
        const events = await start(a.client, "bad", bad);
        const ev = last(events);
        expect(ev.case).toBe("failed");
        if (ev.case !== "failed") continue;
        expect(StartFailureCode[ev.value.code]).toBe(StartFailureCode[code]);
        expect(ev.value.message).toContain(`sha256 ${bad.sha256}`);
        expect(ev.value.message).toContain(bad.source);
        expect(ev.value.message).toContain(why);
        expect(events.some((e) => e.event.case === "spawned")).toBe(false);
      }
      // nothing half-written: no partial of the wrong digest, nothing cached under it
      expect(await readdir(join(modelsPath, ".warden-cache", "partial"))).toEqual([]);
      expect((await readdir(join(modelsPath, ".warden-cache", "sha256"))).some((f) => f === "3".repeat(64))).toBe(false);
    } finally {
      a.client.close();
      await a.proc.terminate();
    }
  }, 120_000);

  it("kill -9 of the agent mid-pull: the restarted agent resumes the partial with a Range request and caches a verified file", async () => {
    const { artifact, body, name } = publish(2_000_000);
    server.chunkBytes = 100_000;
    server.paceMs = 250;
    const partial = join(modelsPath, ".warden-cache", "partial", `${artifact.sha256}.partial`);
    const first = await agent();
    const ctl = new AbortController();
    const pending = start(first.client, "resumed", artifact, newIncarnation(), ctl.signal).catch(() => []);
    let kept: number;
    try {
      kept = await waitFor("some bytes in the partial", async () => {
        const s = await stat(partial).catch(() => undefined);
        return s !== undefined && s.size >= 300_000 ? s.size : undefined;
      }, 60_000);
      first.proc.child.kill("SIGKILL");
      await first.proc.exited;
    } finally {
      ctl.abort();
      await pending;
      first.client.close();
    }
    server.paceMs = 0;
    const onDisk = (await stat(partial)).size;
    expect(onDisk).toBeGreaterThanOrEqual(kept);
    expect(await stat(join(modelsPath, ".warden-cache", "sha256", artifact.sha256)).catch(() => undefined)).toBeUndefined();
    const second = await agent();
    try {
      const events = await start(second.client, "resumed", artifact);
      expect(last(events).case, show(events)).toBe("ready");
      const pulling = events.flatMap((e) => (e.event.case === "pulling" ? [e.event.value] : []));
      expect(pulling[0]?.doneBytes).toBe(BigInt(onDisk));
      const reqs = server.requestsFor(`/${name}`);
      expect(reqs.map((r) => r.range)).toEqual([undefined, `bytes=${String(onDisk)}-`]);
      expect((await readFile(join(modelsPath, ".warden-cache", "sha256", artifact.sha256))).equals(body)).toBe(true);
      expect(await readdir(join(modelsPath, ".warden-cache", "partial"))).toEqual([]);
    } finally {
      second.client.close();
      await second.proc.terminate();
    }
  }, 180_000);
});
