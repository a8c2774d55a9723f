import { setTimeout as sleep } from "node:timers/promises";
import { forkChild, nextMessage, stopChild, stopGenerators } from "./swarm-children.js";
import { measureSide, type SideFigures, type SwarmOptions } from "./swarm-run.js";

/**
 * The swarm's baseline: the same load generator against a bare grpc-js
 * server (swarm-floor.ts), with its own event-loop delay p99 read in the
 * coordinator's windows (every 5 s, shorter for a short run): what the
 * loaded machine alone does to a loop.
 */
export async function measureFloor(o: Required<SwarmOptions>, tokensFile: string): Promise<{ readonly fig: SideFigures; readonly loopP99s: number[] }> {
  const child = forkChild("swarm-floor.ts", []);
  const loopP99s: number[] = [];
  try {
    const { address } = await nextMessage<{ address: string }>(child, "listening", 60_000);
    const askLoop = async (): Promise<number> => {
      const p = nextMessage<{ p99Ms: number }>(child, "loop", 10_000);
      child.send({ t: "loop" });
      return (await p).p99Ms;
    };
    const side = await measureSide(child.pid ?? 0, address, { ...o, warmupMs: Math.min(o.warmupMs, 3_000) }, tokensFile, async (signal) => {
      await askLoop(); // resets the window
      while (!signal.aborted) {
        await sleep(Math.min(5_000, o.steadyMs / 2));
        loopP99s.push(await askLoop());
      }
    });
    await stopGenerators(side.gen);
    return { fig: side.fig, loopP99s };
  } finally {
    await stopChild(child);
  }
}
