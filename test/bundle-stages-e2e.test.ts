/**
 * A backend bundle's stages on a real agent's StartBackend stream: an OCI
 * image (run.sh starting backend-sim) pushed by `skopeo` to a real
 * `docker-registry`, named by digest in a real agent process's catalog. The
 * start's events come in this order — the image's manifest read (resolving)
 * before any layer's bytes (pulling), the layers extracted (unpacking) after
 * them, installed, then the spawn, loading and ready — and a second start of
 * the installed bundle has no install stage at all. Only the order of the
 * stream's events is asserted, never when they came.
 */
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient } from "@warden/grpc";
import { AgentService, StartStage, type StartBackendResponse } from "@warden/proto";
import { killLeftBehind, liveTaggedSims, newIncarnation, randomPortRange, tempDir, testTagVar, uniqueTag } from "./support/agent-harness.js";
import { startAgentProcess, writeAgentConfig, type AgentProcess } from "./support/agent-process.js";
import { pushImage, startRegistry, tarOf, type Registry } from "./support/oci-registry.js";

const fileTag = uniqueTag("bundle-stages");
const ports = randomPortRange(4);
const simMain = join(import.meta.dirname, "..", "services", "cli", "dist", "backend-sim.js");
const started: AgentProcess[] = [];
let dir: string;
let registry: Registry;

beforeAll(async () => {
  dir = await tempDir("warden-bundle-stages");
  registry = await startRegistry(dir);
}, 60_000);

afterAll(async () => {
  const leaked = await liveTaggedSims(fileTag);
  await killLeftBehind(started, leaked);
  await registry.stop();
  await rm(dir, { recursive: true, force: true });
  expect(leaked).toEqual([]);
});

/** The stream's events in order, a run of `pulling` events as one (how many depends on the layer's size), a stage by its name. */
function steps(events: readonly StartBackendResponse[]): string[] {
  const out: string[] = [];
  for (const e of events) {
    const step = e.event.case === "stage" ? `stage ${StartStage[e.event.value.stage].toLowerCase()}` : e.event.case === "failed" ? `failed: ${e.event.value.message}` : (e.event.case ?? "none");
    if (out[out.length - 1] !== step || step !== "pulling") out.push(step);
  }
  return out;
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

describe("a backend bundle's stages on the StartBackend stream (real agent, real registry)", () => {
  it("resolving → pulling → unpacking → installed → spawned → loading → ready; an installed bundle has no install stage", async () => {
    const runSh = `#!/bin/sh\nexec "${process.execPath}" "${simMain}" "$@"\n`;
    const pushed = await pushImage(join(dir, "layout"), registry.host, "localai/sim", "v1", [tarOf([{ name: "run.sh", body: runSh, mode: 0o755 }])]);
    const configPath = join(dir, "agent.yaml");
    await writeAgentConfig(configPath, {
      nodeId: "bundle-stages",
      stateDir: join(dir, "state"),
      modelsPath: join(dir, "models"),
      ports: { min: ports.min, max: ports.max, quarantine: "0s" },
      catalog: { bundled: { bundle: { source: `oci+http://${registry.host}/localai/sim@sha256:${pushed.manifest}` }, env: { [testTagVar]: fileTag } } },
      grace: "5s",
      readiness: { attempts: 100, interval: "200ms", initialInterval: "25ms" },
      nvidiaSmi: "",
      orphanScanInterval: "1h",
    });
    const proc = await startAgentProcess(configPath, ["--stop-backends-on-exit"]);
    started.push(proc);
    try {
      const first = await startOf(proc);
      expect(steps(first)).toEqual(["stage resolving", "stage pulling", "pulling", "stage unpacking", "stage installed", "spawned", "loading", "ready"]);
      // The layer's pulling events end verified, all of it done, before the unpacking begins.
      const lastPull = first.filter((e) => e.event.case === "pulling").pop()?.event.value;
      expect(lastPull).toMatchObject({ sha256: pushed.layers[0]?.sha256, verified: true, doneBytes: BigInt(pushed.layers[0]?.size ?? -1) });
      const again = await startOf(proc);
      expect(steps(again)).toEqual(["spawned", "loading", "ready"]);
    } finally {
      await proc.terminate();
    }
  }, 120_000);
});
