/**
 * Ground truth from the process table: samples the backend processes this
 * file's agents run (tagged backend-sim, read from /proc) every `intervalMs`.
 * A sample lists only processes alive at one common moment: a first pass scans
 * /proc and reads each process's mark (node, incarnation), a second pass
 * checks each one is still alive; a process alive at both passes was alive
 * from the end of the first to the start of the second, so two processes in
 * one sample really ran together (a stop followed by a start never shows as an
 * overlap because the scan was slow). A process seen once and later not alive
 * is a disappearance, recorded with the sample numbers around it.
 */
import { pidAlive } from "./agent-harness.js";
import { runningBackends, type RunningBackend } from "./chaos-checks.js";

export interface BackendSample {
  /** 0, 1, 2…: the order of samples (no wall time: the checks must not depend on it). */
  readonly n: number;
  readonly backends: readonly RunningBackend[];
}

export interface Disappearance {
  readonly pid: number;
  readonly nodeId: string;
  readonly incarnation: string;
  /** The last sample it was in, and the first one after it was found gone. */
  readonly lastSeen: number;
  readonly goneBy: number;
}

export interface SamplerResult {
  readonly samples: readonly BackendSample[];
  readonly disappeared: readonly Disappearance[];
  /** Every incarnation ever seen running (node/incarnation key → backend). */
  readonly seen: ReadonlyMap<string, RunningBackend>;
}

export interface ProcessSampler {
  /** Ends sampling after the sample under way; returns everything observed. */
  stop(): Promise<SamplerResult>;
  /** Samples taken so far. */
  count(): number;
}

export function sampleProcesses(tagPrefix: string, intervalMs = 200): ProcessSampler {
  const samples: BackendSample[] = [];
  const disappeared: Disappearance[] = [];
  const seen = new Map<string, RunningBackend>();
  // pid → (backend, last sample it was confirmed in)
  const live = new Map<number, { b: RunningBackend; last: number }>();
  const state = { on: true };
  const loop = (async () => {
    while (state.on) {
      const n = samples.length;
      const first = await runningBackends(tagPrefix);
      const alive = await Promise.all(first.map((b) => pidAlive(b.pid)));
      const both = first.filter((_, i) => alive[i] === true);
      samples.push({ n, backends: both });
      const now = new Set(both.map((b) => b.pid));
      for (const b of both) {
        live.set(b.pid, { b, last: n });
        seen.set(`${b.nodeId}/${b.incarnation}`, b);
      }
      for (const [pid, v] of live) {
        if (now.has(pid) || (await pidAlive(pid))) continue;
        live.delete(pid);
        disappeared.push({ pid, nodeId: v.b.nodeId, incarnation: v.b.incarnation, lastSeen: v.last, goneBy: n });
      }
      await new Promise((r) => setTimeout(r, intervalMs));
    }
  })();
  return {
    count: () => samples.length,
    async stop() {
      state.on = false;
      await loop;
      return { samples, disappeared, seen };
    },
  };
}
