/**
 * The artifact cache's disk budget through a real agent process pulling from
 * a real HTTP server for real starts of backend-sim: files no running backend
 * uses are evicted least recently used first when a pull needs room (logged),
 * a running backend's file never is (also after the agent restarts and adopts
 * it), and a pull the budget cannot hold fails the start as no space, naming
 * the artifact, with nothing written.
 */
import { mkdir, readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createClient, type Client } from "@warden/grpc";
import { AgentService, StartFailureCode, type StartBackendResponse } from "@warden/proto";
import { newIncarnation, randomPortRange, simCatalog, uniqueTag } from "./support/agent-harness.js";
import { startAgentProcess, writeAgentConfig, type AgentProcess } from "./support/agent-process.js";
import { artifactAgentRig } from "./support/artifact-agent-rig.js";
import { bytesOf, sha256Hex } from "./support/artifact-server.js";

const fileTag = uniqueTag("cache-budget");
const rig = artifactAgentRig("warden-cache-budget", fileTag);
const ports = randomPortRange(12);
const fileBytes = 1_500_000;
let n = 0;

interface Artifact { source: string; sha256: string; sizeBytes: bigint; path: string }

/** An agent with its own models dir and a 3.5 MB cache budget: room for two of the 1.5 MB files, not three. */
async function setup(name: string): Promise<{ modelsPath: string; configPath: string }> {
  const modelsPath = join(rig.dir, name, "models");
  const configPath = join(rig.dir, name, "agent.yaml");
  await mkdir(modelsPath, { recursive: true });
  await writeAgentConfig(configPath, {
    nodeId: `budget-${name}`,
    stateDir: join(rig.dir, name, "state"),
    modelsPath,
    artifactCacheBudget: 3_500_000,
    ports: { min: ports.min, max: ports.max, quarantine: "0s" },
    catalog: { sim: simCatalog(fileTag) },
    grace: "5s",
    readiness: { attempts: 100, interval: "200ms", initialInterval: "25ms" },
    nvidiaSmi: "",
    orphanScanInterval: "1h",
  });
  return { modelsPath, configPath };
}

async function agent(configPath: string, args: string[] = ["--stop-backends-on-exit"]): Promise<{ proc: AgentProcess; client: Client<typeof AgentService> }> {
  const proc = await startAgentProcess(configPath, args);
  rig.started.push(proc);
  return { proc, client: createClient(AgentService, proc.address) };
}

function publish(): Artifact {
  const name = `b${String(++n)}.bin`;
  const body = bytesOf(fileBytes, 300 + n);
  rig.server.files.set(`/${name}`, body);
  return { source: `${rig.server.url}/${name}`, sha256: sha256Hex(body), sizeBytes: BigInt(fileBytes), path: `models/${name}` };
}

async function start(client: Client<typeof AgentService>, model: string, artifact: Artifact): Promise<{ events: StartBackendResponse[]; incarnation: string; address: string }> {
  const events: StartBackendResponse[] = [];
  const incarnation = newIncarnation();
  const req = { incarnation, model, backend: "sim", modelFile: artifact.path, artifacts: [artifact], options: [`sim.model_file_sha256:${artifact.sha256}`] };
  for await (const ev of client.startBackend(req, { timeoutMs: 60_000 })) events.push(ev);
  const spawned = events.find((e) => e.event.case === "spawned");
  return { events, incarnation, address: spawned?.event.case === "spawned" ? spawned.event.value.address : "" };
}

function last(events: readonly StartBackendResponse[]): StartBackendResponse["event"] {
  return events[events.length - 1]?.event ?? { case: undefined };
}

function show(events: readonly StartBackendResponse[]): string {
  return events.map((e) => (e.event.case === "failed" ? `failed: ${e.event.value.message}` : (e.event.case ?? "none"))).join(", ");
}

async function cached(modelsPath: string): Promise<string[]> {
  return (await readdir(join(modelsPath, ".warden-cache", "sha256"))).sort();
}

function evicted(proc: AgentProcess): string[] {
  return proc.lines.flatMap((l) => {
    const o = JSON.parse(l) as { msg?: string; sha256?: string };
    return o.msg === "artifact evicted" && o.sha256 !== undefined ? [o.sha256] : [];
  });
}

describe("artifact cache budget", () => {
  it("evicts the least recently used file no backend runs on, never a running backend's, and fails a pull the budget cannot hold", async () => {
    const { modelsPath, configPath } = await setup("lru");
    const a = await agent(configPath);
    try {
      const [fa, fb, fc, fd] = [publish(), publish(), publish(), publish()] as [Artifact, Artifact, Artifact, Artifact];
      const ra = await start(a.client, "m-a", fa);
      expect(last(ra.events).case, show(ra.events)).toBe("ready");
      const rb = await start(a.client, "m-b", fb);
      expect(last(rb.events).case, show(rb.events)).toBe("ready");
      await a.client.stopBackend({ address: rb.address, incarnation: rb.incarnation, force: true, reason: "admin" }, { timeoutMs: 30_000 });
      // A (older, running) and B (newer, stopped): room for C comes from B.
      const rc = await start(a.client, "m-c", fc);
      expect(last(rc.events).case, show(rc.events)).toBe("ready");
      expect(await cached(modelsPath)).toEqual([fa.sha256, fc.sha256].sort());
      expect(evicted(a.proc)).toEqual([fb.sha256]);
      // A and C both run: D cannot be made room for, and nothing is evicted or written for it.
      const rd = await start(a.client, "m-d", fd);
      const ev = last(rd.events);
      expect(ev.case, show(rd.events)).toBe("failed");
      if (ev.case === "failed") {
        expect(StartFailureCode[ev.value.code]).toBe("ARTIFACT_NO_SPACE");
        expect(ev.value.message).toContain(`sha256 ${fd.sha256}`);
        expect(ev.value.message).toContain("disk budget of 3500000 bytes");
      }
      expect(rd.events.some((e) => e.event.case === "spawned")).toBe(false);
      expect(await cached(modelsPath)).toEqual([fa.sha256, fc.sha256].sort());
      expect(await readdir(join(modelsPath, ".warden-cache", "partial"))).toEqual([]);
      expect(rig.server.requestsFor(`/${fd.path.slice("models/".length)}`)).toEqual([]);
      // Once C stops, D's pull evicts C's file and starts.
      await a.client.stopBackend({ address: rc.address, incarnation: rc.incarnation, force: true, reason: "admin" }, { timeoutMs: 30_000 });
      const again = await start(a.client, "m-d", fd);
      expect(last(again.events).case, show(again.events)).toBe("ready");
      expect(await cached(modelsPath)).toEqual([fa.sha256, fd.sha256].sort());
      expect(evicted(a.proc)).toEqual([fb.sha256, fc.sha256]);
    } finally {
      a.client.close();
      await a.proc.terminate();
    }
  }, 180_000);

  it("a backend adopted after kill -9 of the agent keeps its file: the next pull evicts another", async () => {
    const { modelsPath, configPath } = await setup("adopted");
    const [fe, fg, ff] = [publish(), publish(), publish()] as [Artifact, Artifact, Artifact];
    const first = await agent(configPath, []);
    try {
      const re = await start(first.client, "m-e", fe);
      expect(last(re.events).case, show(re.events)).toBe("ready");
      const rg = await start(first.client, "m-g", fg);
      expect(last(rg.events).case, show(rg.events)).toBe("ready");
      await first.client.stopBackend({ address: rg.address, incarnation: rg.incarnation, force: true, reason: "admin" }, { timeoutMs: 30_000 });
    } finally {
      first.client.close();
      first.proc.child.kill("SIGKILL");
      await first.proc.exited;
    }
    const second = await agent(configPath);
    try {
      // E (older, its backend adopted from the record) stays; G (newer, unused) makes the room.
      const rf = await start(second.client, "m-f", ff);
      expect(last(rf.events).case, show(rf.events)).toBe("ready");
      expect(await cached(modelsPath)).toEqual([fe.sha256, ff.sha256].sort());
      expect(evicted(second.proc)).toEqual([fg.sha256]);
      expect((await stat(join(modelsPath, ".warden-cache", "sha256", fe.sha256))).size).toBe(fileBytes);
    } finally {
      second.client.close();
      await second.proc.terminate();
    }
  }, 180_000);
});
