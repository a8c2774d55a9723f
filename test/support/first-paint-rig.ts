/**
 * The dashboard's first paint at 100 nodes and 1 000 instances: a real
 * coordinator process whose nodes are simulated agents (listing-nodes.ts:
 * the real NodeService calls, ten READY backends adopted per node) and
 * Debian's headless Chromium. Shared by test/dashboard-first-paint.test.ts
 * (content) and test/bench/dashboard-paint.bench.ts (time), so the bench
 * times what the test checks.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type Browser } from "playwright-core";
import { startCoordinatorProcess, type CoordinatorProcess } from "./coordinator-process.js";
import { freePort } from "./free-port.js";
import { startListingSwarm, type ListingSwarm } from "./listing-nodes.js";
import { chromiumPath } from "./dashboard-flow.js";

export const paintNodes = 100;
export const paintModels = Array.from({ length: 10 }, (_, i) => `m${String(i)}`);
export const paintNodeId = (i: number): string => `n-${String(i).padStart(3, "0")}`;

export interface FirstPaintRig {
  readonly url: string;
  readonly browser: Browser;
  close(): Promise<void>;
}

/** `nodes` simulated nodes of ten instances each (the bench's baseline takes one). */
export async function startFirstPaintRig(nodes = paintNodes): Promise<FirstPaintRig> {
  const dir = await mkdtemp(join(tmpdir(), "warden-first-paint-"));
  let coordinator: CoordinatorProcess | undefined;
  let swarm: ListingSwarm | undefined;
  try {
    coordinator = await startCoordinatorProcess(join(dir, "c.json"), {
      listen: `127.0.0.1:${String(await freePort())}`,
      httpListen: "127.0.0.1:0",
      stateDir: join(dir, "state"),
      embeddedAgent: false,
      // The nodes beat once: they stay ready while the page is looked at.
      nodeGrace: "1h",
      limits: { maxConnectionsPerPeer: 256 },
      // Up to a replica per node: adopted instances past a model's max would be scaled down at once.
      models: paintModels.map((m) => ({ id: m, backend: "backend-sim", replicas: { min: 0, max: 1024 } })),
    });
    const s = await startListingSwarm(coordinator.address);
    swarm = s;
    let next = 0;
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next < nodes) await s.add(paintNodeId(next++), paintModels);
      }),
    );
    // Every instance adopted before any page looks (a heartbeat's inventory is applied as it arrives).
    const url = `http://${coordinator.httpAddress ?? ""}`;
    let count = 0;
    for (const end = Date.now() + 120_000; Date.now() < end; await new Promise((r) => setTimeout(r, 250))) {
      const r = (await (await fetch(`${url}/api/dashboard/models?page_size=1000`)).json()) as { instances?: unknown[] };
      count = r.instances?.length ?? 0;
      if (count >= nodes * paintModels.length) break;
    }
    if (count < nodes * paintModels.length) throw new Error(`only ${String(count)} of ${String(nodes * paintModels.length)} instances adopted`);
    const browser = await chromium.launch({ executablePath: chromiumPath, headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
    const c = coordinator;
    return {
      url,
      browser,
      async close() {
        await browser.close().catch(() => undefined);
        await s.close();
        await c.kill();
        await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await swarm?.close();
    await coordinator?.kill();
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}
