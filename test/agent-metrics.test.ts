/** The agent process serves Prometheus metrics behind --metrics. */
import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { createClient } from "@warden/grpc";
import { AgentService } from "@warden/proto";
import { createUlidFactory, cryptoRng, systemClock } from "@warden/common";
import { randomPortRange, until } from "./support/coordinator-harness.js";
import { freePort } from "./support/free-port.js";

const root = resolve(import.meta.dirname, "..");

describe("agent metrics", () => {
  it("serves backends by state on /metrics, and the count follows a start", async () => {
    const dir = await mkdtemp(join(tmpdir(), "warden-agent-metrics-"));
    const listen = `127.0.0.1:${String(await freePort())}`;
    const metrics = `127.0.0.1:${String(await freePort())}`;
    const { min, max } = randomPortRange();
    await writeFile(join(dir, "a.yaml"), `nodeId: m1\nlisten: ${listen}\nstateDir: ${join(dir, "state")}\nports: { min: ${String(min)}, max: ${String(max)} }\nnvidiaSmi: ""\nreadiness: { interval: 200ms, initialInterval: 20ms, attempts: 100 }\ncatalog:\n  backend-sim: { builtin: backend-sim }\n`);
    const p = spawn(process.execPath, ["--import", "tsx", join(root, "services/agent/src/main.ts"), "--config", join(dir, "a.yaml"), "--metrics", metrics, "--stop-backends-on-exit"], { cwd: root, stdio: "ignore" });
    try {
      const scrape = async (): Promise<string | undefined> => {
        try {
          const r = await fetch(`http://${metrics}/metrics`);
          return await r.text();
        } catch {
          return undefined;
        }
      };
      const first = await until("metrics endpoint", scrape);
      expect(first).toMatch(/# TYPE warden_agent_backends gauge/);
      expect(first).toMatch(/warden_agent_memory_bytes\{device="ram",kind="total"\} [1-9]/);
      const agent = createClient(AgentService, listen);
      const incarnation = createUlidFactory(systemClock, cryptoRng)();
      for await (const ev of agent.startBackend({ incarnation, model: "m", backend: "backend-sim" }, { timeoutMs: 60_000 })) if (ev.event.case === "ready" || ev.event.case === "failed") break;
      await until("ready backend counted", async () => ((await scrape()) ?? "").match(/warden_agent_backends\{state="ready"\} 1/) ?? undefined);
      agent.close();
    } finally {
      const exited = new Promise((r) => p.once("exit", r));
      p.kill("SIGTERM");
      await exited;
      await rm(dir, { recursive: true, force: true });
    }
  });
});
